"""Decodes OTLP/HTTP protobuf exports with the official `opentelemetry-proto` package,
independently of the sidecar's encoder (issue 58).

stdin: a JSON list of {"path": "/v1/traces" | "/v1/logs", "body": "<base64>"}.
stdout: {"spans": [...], "logs": [...]}, ids in lower-case hex, attribute values as JSON.
"""

import base64
import json
import sys

import rfc8785

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def main():
    spans, logs = [], []
    for post in json.load(sys.stdin):
        body = base64.b64decode(post["body"])
        if post["path"] == "/v1/traces":
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        spans.append({
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "trace_state": s.trace_state,
                            "name": s.name,
                            "kind": s.kind,
                            "attributes": attributes(s.attributes),
                            "status_code": s.status.code,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "resource": resource,
                            "scope": ss.scope.name,
                        })
        elif post["path"] == "/v1/logs":
            req = ExportLogsServiceRequest()
            req.ParseFromString(body)
            for rl in req.resource_logs:
                resource = attributes(rl.resource.attributes)
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        body = value(r.body)
                        logs.append({
                            "body": body,
                            # The body is the receipt's RFC 8785 form, by an independent JCS.
                            "body_is_jcs": isinstance(body, str)
                            and rfc8785.dumps(json.loads(body)).decode() == body,
                            "attributes": attributes(r.attributes),
                            "trace_id": r.trace_id.hex(),
                            "event_name": r.event_name,
                            "severity_number": r.severity_number,
                            "time": r.time_unix_nano,
                            "resource": resource,
                            "scope": sl.scope.name,
                        })
        else:
            raise SystemExit(f"unexpected path {post['path']}")
    json.dump({"spans": spans, "logs": logs}, sys.stdout)


if __name__ == "__main__":
    main()
