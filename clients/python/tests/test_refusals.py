"""Every refusal a write can get, provoked for real through the sidecar, raised as its
exception with its code, detail and receipt — and the receipt verified against the log's key
(kind `rejection`, naming the code). Codes that need another configuration run against a
sidecar of their own (budgets, a freeze, an upstream that is gone)."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import REPO, sidecar_like
from palisade_agent import (
    CODES, Agent, ContractViolation, IdempotencyConflict, LeaseRefused, LeaseSpec, LocalSigner,
    Refusal, RequestFormRefused, StaleFence, Stopped, Unavailable, inverse_header, raise_for_refusal,
    verify_receipt,
)
from palisade_agent._canon import pre_image_hash

ITEM = {"sku": "BOLT-M8", "qty": 5, "warehouse": "BER-1"}


def undo(path: str) -> dict:
    return {"method": "PUT", "path": path, "body": ITEM}


def expect(cls: type[Refusal], code: str, call, vkey: str, receipted: bool = True, kind: str = "rejection") -> Refusal:
    with pytest.raises(cls) as caught:
        call()
    e = caught.value
    assert e.code == code, (e.code, e.detail)
    assert type(e) is CODES[code]
    assert e.detail and e.status >= 400
    if receipted:
        entry = verify_receipt(e.receipt, vkey)
        if kind == "rejection":
            assert entry["kind"] == "rejection" and entry["code"] == code, entry
        else:  # forwarded, then failed: the write's own receipt, with what came back
            assert entry["kind"] == kind and entry["upstream_status"] == e.status, entry
    return e


@pytest.fixture()
def path() -> str:
    return f"/api/v2/items/r-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def signer(demo) -> LocalSigner:
    return LocalSigner.from_pem(Path(demo.dir / "agent.pem"))


def signed(demo, signer: LocalSigner, path: str, *, target: str | None = None, epoch_bump: int = 1,
           pre_image: str | None = None, spec: LeaseSpec | None = None, **extra) -> dict:
    seen = httpx.get(demo.url + path)
    epoch = int(seen.headers.get("agent-fence-token", "0"))
    return signer.lease(
        target=target or demo.url + path,
        epoch=epoch + epoch_bump,
        pre_image_state_hash=pre_image or pre_image_hash(seen.status_code, seen.content),
        spec=spec or LeaseSpec(inverse=undo(path)),
        **extra,
    )


def test_every_code_has_its_class():
    """The sidecar's code table (policy/core/src/codes.rs), every code mapped to a class of its own kind."""
    table = (REPO / "policy/core/src/codes.rs").read_text()
    codes = set(re.findall(r'= "(ERR_[A-Z0-9_]+)"', table))
    assert len(codes) > 50
    # Every code of the table, the admin listener's and AIP-2.1's included (issue 54).
    missing = sorted(c for c in codes if c not in CODES)
    assert not missing, missing
    assert not sorted(c for c in CODES if c not in codes), "codes the sidecar does not have"


def test_lease_refusals(demo, signer, path):
    agent = Agent(demo.url, authorization="Bearer refusals")
    send = lambda lease, **kw: agent.write("PUT", path, json=ITEM, lease=lease,  # noqa: E731
                                           headers={"agent-compensation-inverse": inverse_header(undo(path))}, **kw)
    v = demo.vkey
    expect(LeaseRefused, "ERR_LEASE_REQUIRED", lambda: agent.write("PUT", path, json=ITEM, raw=True), v)
    expect(LeaseRefused, "ERR_LEASE_MALFORMED", lambda: agent.write(
        "PUT", path, json=ITEM, raw=True, headers={"agent-compensation-lease": "bm90IGEgbGVhc2U"}), v)
    expect(LeaseRefused, "ERR_LEASE_UNTRUSTED_KEY", lambda: send(signed(demo, LocalSigner.generate(), path)), v)
    tampered = {**signed(demo, signer, path), "t_req_ms": 1}
    expect(LeaseRefused, "ERR_LEASE_SIGNATURE", lambda: send(tampered), v)
    expect(LeaseRefused, "ERR_RECOVERY_WINDOW", lambda: send(signed(demo, signer, path, t_granted_ms=1000)), v)
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    expect(LeaseRefused, "ERR_CLOCK_SKEW", lambda: send(signed(demo, signer, path) | signer.lease(
        target=demo.url + path, epoch=1, pre_image_state_hash="sha256:" + "0" * 64,
        spec=LeaseSpec(inverse=undo(path)), now=future)), v)
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    old = signer.lease(target=demo.url + path, epoch=1, pre_image_state_hash="sha256:" + "0" * 64,
                       spec=LeaseSpec(inverse=undo(path)), now=past)
    expect(LeaseRefused, "ERR_LEASE_EXPIRED", lambda: send(old), v)
    expect(LeaseRefused, "ERR_TARGET_MISMATCH", lambda: send(signed(demo, signer, path, target=demo.url + path + "x")), v)
    expect(LeaseRefused, "ERR_INVERSE_NOT_STAGED", lambda: agent.write(
        "PUT", path, json=ITEM, lease=signed(demo, signer, path)), v)
    expect(LeaseRefused, "ERR_INVERSE_DIGEST", lambda: agent.write(
        "PUT", path, json=ITEM, lease=signed(demo, signer, path),
        headers={"agent-compensation-inverse": inverse_header({"method": "DELETE", "path": path})}), v)
    # An irreversible operation takes only HUMAN_ESCROW or DRY_RUN_SHADOW.
    pay = "/api/v2/invoices/7/pay"
    lease = signed(demo, signer, pay, spec=LeaseSpec(inverse={"method": "POST", "path": pay}))
    expect(LeaseRefused, "ERR_RECOVERY_MODE", lambda: agent.write(
        "POST", pay, json={"amount": "10.00", "currency": "EUR"}, lease=lease, idempotency_key="pay-7",
        headers={"agent-compensation-inverse": inverse_header({"method": "POST", "path": pay})}), v)
    # The authority's leases are the caller's own.
    theirs = Agent(demo.url, authorization="Bearer someone-else").lease(path, inverse=undo(path))
    expect(LeaseRefused, "ERR_LEASE_NOT_YOURS", lambda: agent.write("PUT", path, json=ITEM, lease=theirs), v)
    nobody = Agent(demo.url)
    e = expect(LeaseRefused, "ERR_CALLER_UNIDENTIFIED", lambda: nobody.write("PUT", path, json=ITEM), v,
               receipted=False)
    assert e.status == 401
    # Nothing above reached the SoR.
    assert httpx.get(demo.url + path).status_code == 404


def test_an_inverse_undoes_its_own_write_and_the_mode_decides_who_writes_it(demo, signer, path):
    """SPEC §5.4 and §5.7 (issue 54): an inverse elsewhere is `LeaseRefused`
    (`ERR_INVERSE_TARGET`, receipted) from the authority and inline alike; the authority and a
    `LocalSigner` write SNAPSHOT_RESTORE's and DRY_RUN_SHADOW's inverse themselves, and
    COMPENSATING_ACTION without one is refused with a detail that says why."""
    agent = Agent(demo.url, authorization="Bearer modes", vkey=demo.vkey)
    v = demo.vkey
    elsewhere = undo(path + "-victim")
    e = expect(LeaseRefused, "ERR_INVERSE_TARGET", lambda: agent.write("PUT", path, json=ITEM, inverse=elsewhere), v)
    assert e.status == 422
    local = Agent(demo.url, authorization="Bearer modes", vkey=demo.vkey, leases=signer)
    expect(LeaseRefused, "ERR_INVERSE_TARGET", lambda: local.write("PUT", path, json=ITEM, inverse=elsewhere), v)
    e = expect(RequestFormRefused, "ERR_BAD_REQUEST", lambda: agent.write("PUT", path, json=ITEM), v)
    assert "inverse_payload" in e.detail and "COMPENSATING_ACTION" in e.detail
    assert httpx.get(demo.url + path).status_code == 404, "nothing reached the SoR"
    # No inverse given: the authority (and a local signer) restore the pre-image themselves.
    done = agent.write("PUT", path, json=ITEM, mode="SNAPSHOT_RESTORE")
    assert done.status in (200, 201) and done.receipt["kind"] == "commit"
    assert agent.compensate(done.lease_id).status == 200
    assert httpx.get(demo.url + path).status_code == 404, "the absent record was deleted again"
    dry = agent.write("PUT", path, json=ITEM, mode="DRY_RUN_SHADOW")
    assert dry.receipt["outcome"] == "dry-run"
    done = local.write("PUT", path, json=ITEM, mode="SNAPSHOT_RESTORE")
    assert done.receipt["kind"] == "commit"
    with pytest.raises(ValueError, match="needs an inverse"):
        local.write("PUT", path, json=ITEM, mode="COMPENSATING_ACTION")


def test_fence_contract_and_form_refusals(demo, signer, path):
    agent = Agent(demo.url, authorization="Bearer refusals", vkey=demo.vkey)
    v = demo.vkey
    done = agent.write("PUT", path, json=ITEM, inverse=undo(path))
    assert done.receipt["kind"] == "commit"
    inline = {"agent-compensation-inverse": inverse_header(undo(path))}
    e = expect(StaleFence, "ERR_STALE_FENCE_EPOCH", lambda: agent.write(
        "PUT", path, json=ITEM, lease=signed(demo, signer, path, epoch_bump=0), headers=inline), v)
    assert e.current_epoch == done.epoch and not e.pre_image_changed
    e = expect(StaleFence, "ERR_STALE_FENCE_EPOCH", lambda: agent.write(
        "PUT", path, json=ITEM, lease=signed(demo, signer, path, pre_image="sha256:" + "1" * 64), headers=inline), v)
    assert e.pre_image_changed
    e = expect(ContractViolation, "ERR_CONTRACT_INPUT", lambda: agent.write(
        "PUT", path, json={**ITEM, "qty": -3}, inverse=undo(path)), v)
    assert e.location == "/qty" and "-3" not in e.detail
    expect(ContractViolation, "ERR_UNBOUND_OPERATION", lambda: agent.write(
        "PUT", "/api/v2/nowhere/1", json=ITEM, inverse=undo("/api/v2/nowhere/1")), v)
    expect(IdempotencyConflict, "ERR_IDEMPOTENCY_KEY_REQUIRED", lambda: agent.write(
        "POST", "/api/v2/purchase-orders", json={"supplier": "ACME", "lines": [{"sku": "BOLT-M8", "qty": 1}]},
        inverse={"method": "DELETE", "path": "/api/v2/purchase-orders/1"}), v)
    key = f"k-{uuid.uuid4()}"
    agent.write("PUT", path, json=ITEM, inverse=undo(path), idempotency_key=key)
    expect(IdempotencyConflict, "ERR_IDEMPOTENCY_KEY_REUSED", lambda: agent.write(
        "PUT", path, json={**ITEM, "qty": 6}, inverse=undo(path), idempotency_key=key), v)
    expect(RequestFormRefused, "ERR_METHOD_OVERRIDE", lambda: agent.write(
        "POST", path, json=ITEM, inverse=undo(path), headers={"x-http-method-override": "DELETE"}), v)
    # The sidecar refuses spellings of a path it cannot decide on as the SoR will read them.
    encoded = httpx.Request("PUT", httpx.URL(demo.url).copy_with(raw_path=b"/api/v2/items/a%2fb"), json=ITEM)
    expect(RequestFormRefused, "ERR_PATH_NOT_CANONICAL",
           lambda: raise_for_refusal(httpx.Client().send(encoded)), v)
    # A second compensation of one lease.
    agent.compensate(done.lease_id)
    expect(LeaseRefused, "ERR_ALREADY_COMPENSATED", lambda: agent.compensate(done.lease_id), v)


def test_stops_and_outages(demo, path):
    """A freeze and a budget (an operator's stop), an upstream that is gone."""
    budget = sidecar_like(demo, "budget", '[budgets]\nrules = [{ name = "one", per = ["caller"], limit = 1, window = "1m" }]\n')
    try:
        agent = Agent(budget.url, authorization="Bearer budgeted", vkey=budget.vkey)
        agent.write("PUT", path, json=ITEM, inverse=undo(path))
        e = expect(Stopped, "ERR_WRITE_BUDGET", lambda: agent.write("PUT", path, json={**ITEM, "qty": 9},
                                                                      inverse=undo(path)), budget.vkey)
        assert e.retry_after and e.retry_after > 0
        r = httpx.post(budget.admin + "/admin/v1/freeze", json={"scope": "all", "reason": "client test"})
        assert r.status_code == 201, r.text
        other = Agent(budget.url, authorization="Bearer other", vkey=budget.vkey)
        e = expect(Stopped, "ERR_FROZEN", lambda: other.write("PUT", path, json=ITEM, inverse=undo(path)), budget.vkey)
        assert e.problem["reason"] == "client test"
    finally:
        budget.stop()
    gone = sidecar_like(demo, "gone", "", upstream="http://127.0.0.1:9")
    try:
        agent = Agent(gone.url, authorization="Bearer outage")
        signer = LocalSigner.from_pem(Path(demo.dir / "agent.pem"))
        lease = signer.lease(target=gone.url + path, epoch=1, pre_image_state_hash="sha256:" + "0" * 64,
                             spec=LeaseSpec(inverse=undo(path)))
        expect(Unavailable, "ERR_PREIMAGE_UNAVAILABLE", lambda: agent.write(
            "PUT", path, json=ITEM, lease=lease, headers={"agent-compensation-inverse": inverse_header(undo(path))}),
            gone.vkey)
    finally:
        gone.stop()
    off = sidecar_like(demo, "off", '[ptcl]\npre_image = "off"\n', upstream="http://127.0.0.1:9")
    try:
        # Forwarded (its epoch moved), and nothing answered: the commit receipt says 502.
        agent = Agent(off.url, authorization="Bearer outage")
        expect(Unavailable, "ERR_UPSTREAM_UNAVAILABLE", lambda: agent.write("PUT", path, json=ITEM, inverse=undo(path)),
               off.vkey, kind="commit")
    finally:
        off.stop()


def test_form_size_timeout_and_admission(demo, path, tmp_path):
    """Refusals that need a sidecar of another shape: a body limit, an upstream that never
    answers, admission by access tokens (minted here by PyJWT)."""
    import json as _json
    import socket
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from jwt.algorithms import OKPAlgorithm

    from palisade_agent import AdmissionRefused

    small = sidecar_like(demo, "small", '[limits]\nmax_body = "1KiB"\n')
    try:
        agent = Agent(small.url, authorization="Bearer sizes")
        # Refused before the body is read whole: no receipt (docs/decisions.md, data-plane codes).
        expect(RequestFormRefused, "ERR_BODY_TOO_LARGE", lambda: agent.write(
            "PUT", path, json={**ITEM, "sku": "X" * 2048}, inverse=undo(path)), small.vkey, receipted=False)
    finally:
        small.stop()

    # An upstream that takes the connection and never answers: forwarded, then 504.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    port = silent.getsockname()[1]
    slow = sidecar_like(demo, "silent", '[ptcl]\npre_image = "off"\n', upstream=f"http://127.0.0.1:{port}",
                        upstream_timeout="1s")
    try:
        agent = Agent(slow.url, authorization="Bearer timeouts")
        t = time.monotonic()
        e = expect(Unavailable, "ERR_UPSTREAM_TIMEOUT", lambda: agent.write(
            "PUT", path, json=ITEM, inverse=undo(path)), slow.vkey, kind="commit")
        assert e.receipt["receipt"]["outcome"] == "uncertain" and time.monotonic() - t < 10
    finally:
        slow.stop()
        silent.close()

    key = ed25519.Ed25519PrivateKey.generate()  # TEST ONLY key, made for this run
    jwk = _json.loads(OKPAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "client-test", "alg": "EdDSA", "use": "sig"})
    (demo.dir / "as-jwks.json").write_text(_json.dumps({"keys": [jwk]}))
    lock = _json.loads((demo.dir / "bundle" / "lock.json").read_text())
    digest = lock["capabilities"]["items.put"]["contractDigest"]

    def token(operation: str) -> str:
        now = int(time.time())
        claims = {"iss": "https://as.example.com", "aud": "https://erp.example.com/client-test", "sub": "agent-9",
                  "iat": now, "exp": now + 600, "client_id": "planner",
                  "authorization_details": [{"type": "rich_binding", "operations": [
                      {"operation": operation, "contractDigest": digest}]}]}
        return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": "client-test", "typ": "at+jwt"})

    admitted = sidecar_like(demo, "admission", f'[admission]\nmode = "required"\nresource = "https://erp.example.com/client-test"\n'
                                               f'jwks = ["{demo.dir}/as-jwks.json"]\nissuers = ["https://as.example.com"]\n'
                                               f'algorithms = ["EdDSA"]\n')
    try:
        signer = LocalSigner.from_pem(Path(demo.dir / "agent.pem"))
        good = Agent(admitted.url, authorization="Bearer " + token("PUT /api/v2/items/{id}"), leases=signer,
                     vkey=admitted.vkey)
        assert good.write("PUT", path, json=ITEM, inverse=undo(path)).receipt["kind"] == "commit"
        other = Agent(admitted.url, authorization="Bearer " + token("POST /api/v2/items"), leases=signer)
        e = expect(AdmissionRefused, "ERR_NOT_ADMITTED", lambda: other.write("PUT", path, json=ITEM, inverse=undo(path)),
                   admitted.vkey)
        assert e.status == 403
        forged = Agent(admitted.url, authorization="Bearer not.a.token", leases=signer)
        e = expect(AdmissionRefused, "ERR_TOKEN_INVALID", lambda: forged.write("PUT", path, json=ITEM, inverse=undo(path)),
                   admitted.vkey)
        assert e.status == 401
    finally:
        admitted.stop()
