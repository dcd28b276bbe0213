"""Access tokens for tests/it/admission.rs, minted by an independent library: PyJWT with keys that
pyca/cryptography generates (TEST ONLY keys, made fresh for each run, never written anywhere but
the test's temporary directory).

    python tokens.py DIR SPEC_JSON

SPEC_JSON: {"resource", "issuer", "bindingId", "digests": {operation: digest},
"custom": {name: authorization_details}?}. Writes
DIR/jwks.json (the Ed25519, P-256 and RSA keys' public halves) and DIR/jwks-rotated.json (those
and one more key, `kid-new`), and prints {name: token} for every case the test sends.
"""

import base64
import hashlib
import hmac
import json
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

out_dir, spec = sys.argv[1], json.loads(sys.argv[2])
now = int(time.time())

keys = {
    "kid-ed": ("EdDSA", ed25519.Ed25519PrivateKey.generate(), OKPAlgorithm),
    "kid-ec": ("ES256", ec.generate_private_key(ec.SECP256R1()), ECAlgorithm),
    "kid-rsa": ("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048), RSAAlgorithm),
}
new_key = ("EdDSA", ed25519.Ed25519PrivateKey.generate(), OKPAlgorithm)


def public_jwk(kid, entry):
    alg, key, algo = entry
    jwk = json.loads(algo.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig", "alg": alg})
    return jwk


jwks = {"keys": [public_jwk(k, v) for k, v in keys.items()]}
with open(f"{out_dir}/jwks.json", "w") as f:
    json.dump(jwks, f)
rotated = {"keys": jwks["keys"] + [public_jwk("kid-new", new_key)]}
with open(f"{out_dir}/jwks-rotated.json", "w") as f:
    json.dump(rotated, f)

PUT = "PUT /items/{id}"
GET = "GET /items/{id}"


def grant(ops, binding=spec["bindingId"]):
    entry = {"type": "rich_binding", "operations": ops}
    if binding is not None:
        entry["bindingId"] = binding
    return [entry]


def op(name, bound=None, digest=None):
    o = {"operation": name, "contractDigest": digest or spec["digests"][name]}
    if bound is not None:
        o["bound"] = bound
    return o


def claims(**over):
    c = {"iss": spec["issuer"], "aud": spec["resource"], "sub": "agent-7", "client_id": "planner",
         "iat": now, "exp": now + 600, "jti": f"t{time.time_ns()}"}
    if "authorization_details" not in over:
        c["authorization_details"] = grant([op(PUT), op(GET)])
    c.update(over)
    return {k: v for k, v in c.items() if v is not None}


def mint(c, kid="kid-ed", headers=None, entry=None):
    alg, key, _ = entry or keys[kid]
    h = {"kid": kid, "typ": "at+jwt"}
    h.update(headers or {})
    return jwt.encode(c, key, algorithm=alg, headers=h)


def b64(obj):
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


PUT, GET = (PUT, GET) if PUT in spec["digests"] else (None, None)
custom = {name: mint(claims(authorization_details=details))
          for name, details in spec.get("custom", {}).items()}
if PUT is None:
    # Only the custom grants (and the token cases that need no operation).
    print(json.dumps({**custom, "expired": mint(claims(iat=now - 7200, exp=now - 3600,
                                                        authorization_details=None))}))
    sys.exit(0)

tokens = {
    **custom,
    "eddsa": mint(claims()),
    "es256": mint(claims(), kid="kid-ec"),
    "rs256": mint(claims(), kid="kid-rsa"),
    "aud_list": mint(claims(aud=["https://other.example.com", spec["resource"]])),
    "other_subject": mint(claims(sub="agent-9")),
    "bounded": mint(claims(authorization_details=grant([op(PUT, {"type": "object", "properties": {
        "qty": {"type": "integer", "minimum": 0, "maximum": 100}}, "required": ["qty"]})]))),
    "outside_fragment": mint(claims(authorization_details=grant([op(PUT, {"type": "object",
        "properties": {"qty": {"type": "integer", "multipleOf": 5}}})]))),
    "read_only": mint(claims(authorization_details=grant([op(GET)]))),
    "stale_digest": mint(claims(authorization_details=grant([op(PUT, digest="sha-256:" + "0" * 64)]))),
    "other_binding": mint(claims(authorization_details=grant([op(PUT)], binding="urn:other:binding"))),
    "no_binding_id": mint(claims(authorization_details=grant([op(PUT)], binding=None))),
    "no_details": mint(claims(authorization_details=None)),
    "expired": mint(claims(iat=now - 7200, exp=now - 3600)),
    "not_yet": mint(claims(nbf=now + 3600)),
    "future_iat": mint(claims(iat=now + 3600)),
    "no_exp": mint(claims(exp=None)),
    "wrong_iss": mint(claims(iss="https://evil.example.com")),
    "wrong_aud": mint(claims(aud="https://other.example.com")),
    "unknown_kid": mint(claims(), kid="kid-new", entry=new_key),
    "id_token_typ": mint(claims(), headers={"typ": "JWT"}),
    "kid_alg_mismatch": mint(claims(), kid="kid-ec", entry=("ES256", keys["kid-ec"][1], None),
                             headers={"kid": "kid-ed"}),
}
# alg none: no signature at all.
tokens["alg_none"] = f"{b64({'alg': 'none', 'typ': 'at+jwt', 'kid': 'kid-ed'})}.{b64(claims())}."
# HS256 keyed with a public key's bytes (the classic confusion): the JWK text as the secret.
# PyJWT rightly refuses to sign that, so the stdlib's HMAC does.
ed_public = json.dumps(public_jwk("kid-ed", keys["kid-ed"])).encode()
signing_input = f"{b64({'alg': 'HS256', 'typ': 'at+jwt', 'kid': 'kid-ed'})}.{b64(claims())}"
mac = hmac.new(ed_public, signing_input.encode(), hashlib.sha256).digest()
tokens["hs256_public_key"] = f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
# A valid token with one claim changed after signing.
h, p, s = tokens["eddsa"].split(".")
payload = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
payload["authorization_details"][0]["operations"][0]["bound"] = {"type": "object"}
payload["sub"] = "agent-8"
tokens["tampered"] = f"{h}.{b64(payload)}.{s}"
print(json.dumps(tokens))
