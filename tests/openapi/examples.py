"""The request examples of an OpenAPI document, judged by an independent validator.

    python examples.py DOCUMENT.yaml BUNDLE_DIR

For every operation with a JSON request-body example, prints one JSON line:
{"name", "method", "template", "example", "valid", "mutated", "mutation"}: `valid` is what
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


base = lock["bindingId"]
for path, item in doc["paths"].items():
    for method in METHODS:
        op = item.get(method)
        if not op or "requestBody" not in op:
            continue
        media = op["requestBody"].get("content", {}).get("application/json", {})
        example = media.get("example")
        if isinstance(example, str):
            try:
                example = json.loads(example)
            except ValueError:
                example = None
        if not isinstance(example, dict):
            continue
        match = [v for k, v in by_operation.items() if k.startswith(method.upper() + " ") and k.endswith(path)]
        name, cap = match[0]
        schema = contract(cap)["structural"]["input"]
        validator = Draft202012Validator(schema)
        valid = validator.is_valid(example)
        print(json.dumps({
            "name": name,
            "method": method.upper(),
            "template": cap["operation"].split(" ", 1)[1],
            "example": example,
            "valid": valid,
            # Mutations of a valid example only: in an invalid one, the first violation the
            # sidecar names may be the example's own.
            "mutations": mutations(example, schema, validator) if valid else [],
        }))
