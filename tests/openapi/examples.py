"""The request examples of an OpenAPI or Swagger 2.0 document, judged by an independent
validator.

    python examples.py DOCUMENT.yaml BUNDLE_DIR

For every operation with a JSON request-body example, prints one JSON line:
{"name", "method", "template", "path", "query", "headers", "example", "valid", "mutations"}:
`path` is the template with each path parameter given a value its schema admits, and `query`
and `headers` the required ones likewise; `valid` is what
`jsonschema` (Draft 2020-12) says of the example against the input schema of the contract
that `palisade lock import-openapi` wrote for that operation, and `mutations` are the
valid example with one property broken at a time (a wrong type, an enum value that is not
listed), each one the same validator refuses, with the property's location. The document is read with
PyYAML, timestamps left as the strings they are written as (a schema sees JSON).
"""

import copy
import json
import sys

import yaml
from jsonschema import Draft202012Validator

METHODS = ("get", "put", "post", "delete", "patch")


class Loader(yaml.SafeLoader):
    pass


# JSON has no timestamps: keep them as written.
Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

doc = yaml.load(open(sys.argv[1], encoding="utf-8"), Loader=Loader)
bundle = sys.argv[2]
lock = json.load(open(f"{bundle}/lock.json", encoding="utf-8"))
by_operation = {}
for name, cap in lock["capabilities"].items():
    by_operation[cap["operation"]] = (name, cap)


def contract(cap):
    hexd = cap["contractDigest"].split(":", 1)[1]
    return json.load(open(f"{bundle}/contracts/{hexd}.json", encoding="utf-8"))


def resolve(schema, root):
    while isinstance(schema, dict) and "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def mutations(example, schema, validator):
    """Every one-property mutation of `example` the validator refuses: one per property that
    can be broken (the first candidate that breaks it), with the property's location."""
    props = resolve(schema, schema).get("properties", {})
    out = []
    for key in sorted(example):
        s = resolve(props.get(key, {}), schema)
        candidates = []
        if "enum" in s:
            candidates.append("NOT-A-LISTED-VALUE")
        t = s.get("type")
        if t in ("string",):
            candidates.append(12345)
        if t in ("number", "integer", "boolean", "array", "object"):
            candidates.append("not a " + t)
        for c in candidates:
            m = copy.deepcopy(example)
            m[key] = c
            if not validator.is_valid(m):
                out.append({"body": m, "at": "/" + key.replace("~", "~0").replace("/", "~1")})
                break
    return out


def deref(node):
    """A `$ref` within the document followed (a shared Swagger 2.0 parameter, a definition)."""
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def swagger2_example(op):
    """The body parameter's example: the schema's own, or the definition's it names; else one
    made of its properties' documented examples, when every required property has one."""
    for p in op.get("parameters", []):
        p = deref(p)
        if p.get("in") != "body":
            continue
        s = deref(p.get("schema", {}))
        if isinstance(s.get("example"), dict):
            return s["example"]
        props = {k: v for k, v in s.get("properties", {}).items() if "example" in v}
        example = {k: v["example"] for k, v in props.items()}
        if example and all(r in example for r in s.get("required", [])):
            return example
    return None


def openapi3_example(op):
    if "requestBody" not in op:
        return None
    media = op["requestBody"].get("content", {}).get("application/json", {})
    example = media.get("example")
    if isinstance(example, str):
        try:
            example = json.loads(example)
        except ValueError:
            example = None
    return example


def value_for(schema):
    """A value `schema` (a parameter's) admits, as it goes in a path, query or header."""
    schema = resolve(schema or {}, schema or {})
    if schema.get("enum"):
        return str(schema["enum"][0]).lower() if isinstance(schema["enum"][0], bool) else str(schema["enum"][0])
    t = schema.get("type")
    if t in ("integer", "number"):
        return str(max(1, schema.get("minimum", 1)))
    if t == "boolean":
        return "true"
    if t == "array":
        return value_for(schema.get("items", {}))
    return "00000000-0000-0000-0000-000000000001"


base = lock["bindingId"]
swagger2 = doc.get("swagger") == "2.0"
for path, item in doc["paths"].items():
    for method in METHODS:
        op = item.get(method)
        if not op:
            continue
        example = swagger2_example(op) if swagger2 else openapi3_example(op)
        if not isinstance(example, dict):
            continue
        match = [v for k, v in by_operation.items() if k.startswith(method.upper() + " ") and k.endswith(path)]
        name, cap = match[0]
        c = contract(cap)
        schema = c["structural"]["input"]
        params = c["structural"].get("parameters", {})
        template = cap["operation"].split(" ", 1)[1]
        concrete = "/".join(
            value_for(params.get("path", {}).get(seg[1:-1], {}).get("schema")) if seg.startswith("{") else seg
            for seg in template.split("/")
        )
        query = "&".join(
            f"{k}={value_for(v.get('schema'))}"
            for k, v in sorted(params.get("query", {}).items()) if v.get("required")
        )
        headers = {k: value_for(v.get("schema")) for k, v in params.get("header", {}).items() if v.get("required")}
        validator = Draft202012Validator(schema)
        valid = validator.is_valid(example)
        print(json.dumps({
            "name": name,
            "method": method.upper(),
            "template": template,
            "path": concrete,
            "query": query,
            "headers": headers,
            "example": example,
            "valid": valid,
            # Mutations of a valid example only: in an invalid one, the first violation the
            # sidecar names may be the example's own.
            "mutations": mutations(example, schema, validator) if valid else [],
        }))
