"""The sidecar's OpenAPI document (docs/reference/openapi.yaml) against the running binary.

    python tests/docs/check_openapi.py OPENAPI.yaml ADMIN_URL DATA_URL [REQUIRES_URL]

Validates the document with openapi-spec-validator (an independent validator of OpenAPI 3.1),
then calls every documented operation on a running sidecar (`palisade demo`, started by
tests/it/book.rs): path and query parameters and bodies from the document's examples. Each
answer must be one the operation documents (status and media type), and must not be the
router's own "no such route" answer, so a documented route the binary does not serve fails.
Paths marked `x-palisade-requires` are served only with a config section the demo lacks (the
AIP-2.1 relay): they are called on REQUIRES_URL, a sidecar configured with it, or else only
validated and counted as not called.
Prints one line per operation and exits 1 on the first mismatch.
"""

import json
import sys
from urllib.parse import urlencode

import httpx
import yaml
from openapi_spec_validator import validate

ADMIN_DEFAULT = "http://127.0.0.1:9901"
DATA_DEFAULT = "http://127.0.0.1:8080"


def fail(msg):
    print(f"FAIL {msg}")
    sys.exit(1)


def resolve(spec, obj):
    while isinstance(obj, dict) and "$ref" in obj:
        node = spec
        for part in obj["$ref"].lstrip("#/").split("/"):
            node = node[part]
        obj = node
    return obj


def route_miss(base_is_admin, status, ctype, body):
    if base_is_admin:
        return status in (404, 405) and body in ("not found\n", "method not allowed\n")
    if status == 404 and ctype.startswith("application/problem+json"):
        try:
            return json.loads(body).get("detail") == "no sidecar endpoint at this path"
        except ValueError:
            return False
    return False


def main():
    path, admin, data = sys.argv[1:4]
    requires = sys.argv[4] if len(sys.argv) > 4 else None
    spec = yaml.safe_load(open(path))
    validate(spec)
    print(f"ok   {path}: valid OpenAPI {spec['openapi']} (openapi-spec-validator)")
    operations, skipped = 0, 0
    with httpx.Client(timeout=10) as http:
        for route, item in spec["paths"].items():
            for method, op in item.items():
                if method not in ("get", "post", "put", "delete", "patch"):
                    continue
                operations += 1
                server = (op.get("servers") or spec["servers"])[0]["url"]
                is_admin = server == ADMIN_DEFAULT
                base = admin if is_admin else data
                # Served only with a config section the demo lacks: called on REQUIRES_URL,
                # or, without one, validated above and counted as not called.
                if item.get("x-palisade-requires"):
                    if not requires:
                        skipped += 1
                        print(f"skip {method.upper():6} {route} (needs {item['x-palisade-requires']})")
                        continue
                    base = requires
                url_path, query = route, {}
                for p in [resolve(spec, p) for p in op.get("parameters", [])]:
                    if "example" not in p:
                        continue
                    if p["in"] == "path":
                        url_path = url_path.replace("{" + p["name"] + "}", str(p["example"]))
                    elif p["in"] == "query":
                        query[p["name"]] = p["example"]
                url = base + url_path + (("?" + urlencode(query)) if query else "")
                headers = {"authorization": "Bearer demo-agent"} if not is_admin else {}
                # SPEC §9: every mutating admin call says it is JSON, body or not.
                if is_admin and method != "get":
                    headers["content-type"] = "application/json"
                body = None
                rb = resolve(spec, op.get("requestBody")) if op.get("requestBody") else None
                if rb:
                    example = rb["content"]["application/json"].get("example")
                    if example is not None:
                        body = json.dumps(example)
                        headers["content-type"] = "application/json"
                with http.stream(method.upper(), url, headers=headers, content=body) as resp:
                    ctype = resp.headers.get("content-type", "")
                    if ctype.startswith("text/event-stream"):
                        text = ""  # a stream: its head is the answer
                    else:
                        text = resp.read().decode("utf-8", "replace")
                status = str(resp.status_code)
                if route_miss(is_admin, resp.status_code, ctype, text):
                    fail(f"{method.upper()} {route}: the binary does not serve it ({status} {text.strip()[:80]})")
                documented = op["responses"]
                if status not in documented:
                    fail(f"{method.upper()} {route}: answered {status}, documented {sorted(documented)}: {text[:160]}")
                content = resolve(spec, documented[status]).get("content", {})
                media = ctype.split(";")[0].strip()
                if content and media not in content:
                    fail(f"{method.upper()} {route}: {status} as {media}, documented {sorted(content)}")
                print(f"ok   {method.upper():6} {route} -> {status} {media}")
    if operations < 30:
        fail(f"only {operations} operations documented")
    print(json.dumps({"ok": True, "operations": operations, "not_called": skipped}))


if __name__ == "__main__":
    main()
