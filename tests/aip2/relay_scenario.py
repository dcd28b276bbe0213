"""The negotiation relay (seed 001 §6.3) end to end (run by tests/it/aip2.rs): the agirails SDK's own
RelayChannel posts and polls through palisade, and verifies every message it is handed; httpx
checks the wire: statuses, cursors, caps, dedup, inbox, byte-for-byte envelopes, refusals.

    python relay_scenario.py main|restart PALISADE_URL ADMIN_URL STATE_FILE

Exits non-zero with the first failed expectation. Every refusal is checked for its status, its
code, the seed's `error` member, a rejection receipt, and that nothing was stored.
"""

import asyncio
import itertools
import json
import sys
import time

import httpx

from agirails.builders.quote import QuoteMessage
from agirails.negotiation.negotiation_channel import (
    NegotiationMessage,
    RelayChannel,
    RelayChannelConfig,
    _wire_to_envelope,
)

import sdk_messages as sdk
from sdk_messages import check, raw

PHASE, PAL, ADMIN, STATE = sys.argv[1:5]
BASE = "/api/v1/negotiations"
PROVIDER = sdk.did(sdk.PROVIDER_KEY)
CONSUMER = sdk.did(sdk.CONSUMER_KEY)
# Each post from its own documentation address (palisade trusts 127.0.0.1's X-Forwarded-For),
# so the per-client rate limit is tested on purpose only.
_ips = (f"198.51.{a}.{b}" for a, b in itertools.product(range(100), range(1, 255)))
_nonces = itertools.count(1000)


def tx_of(n):
    return "0x" + f"{n:064x}"


def post(tx, body, client_ip=None, url=None):
    headers = {"content-type": "application/json", "x-forwarded-for": client_ip or next(_ips)}
    return httpx.post(url or f"{PAL}{BASE}/{tx}/messages", content=body, headers=headers, timeout=30)


def listing(tx, after=None):
    q = f"?after={after}" if after is not None else ""
    r = httpx.get(f"{PAL}{BASE}/{tx}/messages{q}", timeout=30)
    check(r.status_code == 200, f"list {tx}: {r.status_code} {r.text}")
    return r


def inbox(did, after=None, quote=True):
    d = did.replace(":", "%3A") if quote else did
    q = f"?after={after}" if after is not None else ""
    r = httpx.get(f"{PAL}{BASE}/inbox/{d}{q}", timeout=30)
    check(r.status_code == 200, f"inbox {did}: {r.status_code} {r.text}")
    return r.json()["messages"]


def refused(resp, status, code, what, tx=None):
    check(resp.status_code == status, f"{what}: status {resp.status_code} != {status}: {resp.text}")
    check(resp.headers["content-type"].startswith("application/problem+json"), f"{what}: problem+json")
    p = resp.json()
    check(p.get("code") == code, f"{what}: code {p.get('code')} != {code}")
    check(isinstance(p.get("error"), str) and p["error"], f"{what}: the seed's error member")
    if code != "ERR_RATE_LIMITED":
        check(sdk.logged(p.get("receipt")).get("kind") == "rejection", f"{what}: rejection receipt")
    if tx is not None:
        check(listing(tx).json()["messages"] == [], f"{what}: nothing was stored")
    return p


def sign(kind, tx, **kw):
    return sdk.sign(kind, nonce=next(_nonces), tx=tx, **kw)


def as_sdk_message(envelope):
    """The SDK's own typed message for an envelope our signer helper made."""
    if envelope["type"] == "agirails.quote.v1":
        return NegotiationMessage(type=envelope["type"], message=QuoteMessage.from_dict(envelope["message"]))
    return _wire_to_envelope(envelope)


async def sdk_round_trip():
    """Quote, counter-offer, counter-accept posted by the SDK's RelayChannel (a quote in its
    snake_case dataclass form) and delivered, verified by the SDK, to a txId subscriber and to
    both parties' inbox subscribers."""
    tx = tx_of(1)
    # The Python SDK's RelayChannel cannot verify a counter-offer that has a justification on
    # receive (agirails 4.8.0 rebuilds it with a dict where its verifier wants an object, and
    # drops the message): the round trip uses one without. Counter-offers with one are
    # relayed below, read with httpx.
    envs = [sign("agirails.quote.v1", tx),
            sign("agirails.counteroffer.v1", tx, justification=False),
            sign("agirails.counteraccept.v1", tx)]
    kernels = {84532: sdk.KERNEL}
    got_tx, got_provider, got_consumer = [], [], []

    def channel():
        return RelayChannel(RelayChannelConfig(
            kernel_address_by_chain_id=kernels, base_url=PAL, poll_interval_ms=50,
            allow_insecure_targets=True,
            http_client=httpx.AsyncClient(headers={"x-forwarded-for": "198.18.1.1"}, timeout=30)))

    provider, consumer, watcher = channel(), channel(), channel()
    watcher.subscribe_tx_id(tx, lambda d: got_tx.append(d))
    provider.subscribe_agent(PROVIDER, lambda t, d: got_provider.append((t, d)))
    consumer.subscribe_agent(CONSUMER, lambda t, d: got_consumer.append((t, d)))
    await provider.post(tx, as_sdk_message(envs[0]))
    await consumer.post(tx, as_sdk_message(envs[1]))
    await provider.post(tx, as_sdk_message(envs[2]))
    # Posting again is idempotent (200 duplicate is a 2xx to the SDK).
    await consumer.post(tx, as_sdk_message(envs[1]))
    deadline = time.time() + 10
    while time.time() < deadline and (len(got_tx) < 3 or len(got_provider) < 3 or len(got_consumer) < 3):
        await asyncio.sleep(0.05)
    for ch in (provider, consumer, watcher):
        await ch.close()
    check([d.envelope.type for d in got_tx] == [e["type"] for e in envs],
          f"the txId subscriber got the three, verified, in order: {[d.envelope.type for d in got_tx]}")
    cursors = [int(d.cursor) for d in got_tx]
    check(cursors == sorted(cursors) and len(set(cursors)) == 3, f"cursors grow: {cursors}")
    check(len(got_provider) == 3 and all(t == tx for t, _ in got_provider), "the provider's inbox, with txId")
    check(len(got_consumer) == 3, "the consumer's inbox")
    check(got_tx[1].envelope.message.signature == envs[1]["message"]["signature"], "the SDK's own signature")
    # The quote went over the wire as the Python SDK sends it, and comes back as it was sent.
    first = listing(tx).json()["messages"][0]["envelope"]
    check("tx_id" in first["message"], "the SDK's snake_case quote is listed as posted")


def wire_and_dedup():
    tx = tx_of(2)
    env = sign("agirails.counteroffer.v1", tx)
    body = json.dumps(env, indent=1).encode()  # a spelling of our own: listed as sent
    r = post(tx, body)
    check(r.status_code == 201 and r.json()["ok"] is True, f"201 ok: {r.status_code} {r.text}")
    r2 = post(tx, raw(env))  # the same message, another spelling: one signature
    check(r2.status_code == 200 and r2.json().get("duplicate") is True, f"200 duplicate: {r2.text}")
    # The same signature spelled with v = 0/1, or in upper-case hex: still one message (issue 44).
    for low_v, upper in [(True, False), (False, True), (True, True)]:
        again = sdk.respell_signature(env, low_v=low_v, upper=upper)
        check(again["message"]["signature"] != env["message"]["signature"], "a respelling")
        r3 = post(tx, raw(again))
        check(r3.status_code == 200 and r3.json().get("duplicate") is True,
              f"v low {low_v}, upper {upper}: 200 duplicate: {r3.status_code} {r3.text}")
    lst = listing(tx)
    check(body in lst.content, "the envelope is listed byte for byte as first posted")
    msgs = lst.json()["messages"]
    check(len(msgs) == 1 and msgs[0]["envelope"] == env, "one message, kept once")
    check(isinstance(msgs[0]["cursor"], str) and msgs[0]["cursor"].isdigit(), "an opaque numeric cursor")
    check(abs(msgs[0]["receivedAt"] - time.time()) < 60, "receivedAt in unix seconds")
    check(listing(tx, after=msgs[0]["cursor"]).json()["messages"] == [], "nothing after the last cursor")
    # The camelCase (AIP-2, TypeScript SDK) form of a quote is accepted too.
    q = sign("agirails.quote.v1", tx)
    check(post(tx, raw(q)).status_code == 201, "a camelCase quote")
    # The txId in the path in another letter case is the same transaction.
    check(len(listing(tx.upper().replace("0X", "0x")).json()["messages"]) == 2, "txId case-insensitive")


def caps_and_pages():
    """50 messages per transaction (the 51st → 429), 50 a page per transaction, 100 a page per
    inbox; cursors page through without gaps or repeats."""
    a, b = tx_of(3), tx_of(4)
    for tx in (a, b):
        for i in range(50):
            r = post(tx, raw(sign("agirails.counteroffer.v1", tx)))
            check(r.status_code == 201, f"message {i + 1} of {tx[:8]}: {r.status_code} {r.text}")
    over = sign("agirails.counteroffer.v1", a)
    refused(post(a, raw(over)), 429, "ERR_RELAY_TX_FULL", "the 51st message of a transaction")
    first = listing(a).json()["messages"]
    check(len(first) == 50, f"a transaction's page holds 50: {len(first)}")
    dup = post(a, raw(first[0]["envelope"]))
    check(dup.status_code == 200, f"a kept message is still a duplicate past the cap: {dup.status_code}")
    check(listing(a, after=first[-1]["cursor"]).json()["messages"] == [], "nothing after the 50th")
    half = listing(a, after=first[24]["cursor"]).json()["messages"]
    check([m["cursor"] for m in half] == [m["cursor"] for m in first[25:]], "after= pages on")
    # The consumer's inbox: 100+ messages (both transactions and the earlier ones).
    seen, after = [], None
    while True:
        page = inbox(CONSUMER, after)
        check(len(page) <= 100, f"an inbox page holds at most 100: {len(page)}")
        if not page:
            break
        seen += page
        after = page[-1]["cursor"]
    cursors = [int(m["cursor"]) for m in seen]
    check(cursors == sorted(set(cursors)), "inbox cursors rise, no repeats")
    check(len([m for m in seen if m["txId"] in (a, b)]) == 100, "every message of both transactions")
    check(len(inbox(CONSUMER)) == 100, "the first inbox page is full")
    # A DID without its chain and an unescaped one name the same party.
    bare = "did:ethr:" + CONSUMER.split(":")[-1]
    check(inbox(bare)[0]["cursor"] == inbox(CONSUMER)[0]["cursor"], "a DID without its chain")
    check(inbox(CONSUMER, quote=False)[0]["cursor"] == inbox(CONSUMER)[0]["cursor"], "an unescaped DID")
    check(inbox("did:ethr:8453:" + CONSUMER.split(":")[-1]) == [], "another chain's inbox is another")


def refusals():
    tx = tx_of(5)
    q = sign("agirails.quote.v1", tx)
    refused(post(tx_of(6), raw(q)), 400, "ERR_QUOTE_CHANNEL", "txId A posted to …/B", tx=tx_of(6))
    mainnet = sign("agirails.quote.v1", tx, chain=8453)
    refused(post(tx, raw(mainnet)), 400, "ERR_QUOTE_CHAIN_UNKNOWN", "a chain with no kernel", tx=tx)
    now = int(time.time())
    expired = sign("agirails.quote.v1", tx, at=now - 3660, expires_in=3600)
    refused(post(tx, raw(expired)), 410, "ERR_QUOTE_EXPIRED", "expiresAt = now - 60", tx=tx)
    forged = json.loads(json.dumps(q))
    forged["message"]["quotedAmount"] = "9000000"
    refused(post(tx, raw(forged)), 401, "ERR_QUOTE_SIGNATURE", "a forged amount", tx=tx)
    by_provider = sign("agirails.counteroffer.v1", tx, signer=sdk.PROVIDER_KEY)
    refused(post(tx, raw(by_provider)), 401, "ERR_QUOTE_SIGNATURE", "a counter-offer signed by the provider", tx=tx)
    extra = json.loads(json.dumps(q))
    extra["message"]["note"] = "x"
    refused(post(tx, raw(extra)), 400, "ERR_QUOTE_MALFORMED", "a member the schema does not have", tx=tx)
    twin = json.loads(json.dumps(q))
    twin["message"]["tx_id"] = twin["message"]["txId"]
    refused(post(tx, raw(twin)), 400, "ERR_QUOTE_MALFORMED", "a quote with both spellings of txId", tx=tx)
    refused(post(tx, b"{not json"), 400, "ERR_QUOTE_MALFORMED", "not JSON", tx=tx)
    refused(post(tx, b'{"type":"agirails.quote.v1","message":{},"type":"x"}'), 400, "ERR_QUOTE_MALFORMED",
            "a duplicate member", tx=tx)
    refused(post(tx, b"x" * (70 << 10)), 413, "ERR_BODY_TOO_LARGE", "a 70 KiB body", tx=tx)
    r = httpx.put(f"{PAL}{BASE}/{tx}/messages", content=raw(q))
    refused(r, 405, "ERR_METHOD_NOT_ALLOWED", "PUT on a transaction's messages", tx=tx)
    check(r.headers.get("allow") == "GET, POST", "Allow: GET, POST")
    r = httpx.post(f"{PAL}{BASE}/inbox/{CONSUMER}", content=raw(q))
    refused(r, 405, "ERR_METHOD_NOT_ALLOWED", "POST to an inbox")
    for bad in ["after=-1", "after=x", "after="]:
        refused(httpx.get(f"{PAL}{BASE}/{tx}/messages?{bad}"), 400, "ERR_BAD_REQUEST", f"cursor {bad}")
    refused(httpx.get(f"{PAL}{BASE}/0x12/messages"), 400, "ERR_BAD_REQUEST", "a txId that is not bytes32")
    refused(httpx.get(f"{PAL}{BASE}/inbox/did:web:example.com"), 400, "ERR_BAD_REQUEST", "a DID not did:ethr")
    refused(httpx.get(f"{PAL}{BASE}/{tx}"), 404, "ERR_NOT_FOUND", "a path the relay does not serve")


def rate_limit():
    tx = tx_of(7)
    body = b"{}"
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)
    codes = [post(tx, body, client_ip="203.0.113.77").status_code for _ in range(60)]
    check(codes == [400] * 60, f"60 posts in a minute pass the limit: {set(codes)}")
    r = post(tx, body, client_ip="203.0.113.77")
    refused(r, 429, "ERR_RATE_LIMITED", "the 61st post in a minute")
    check(int(r.headers["retry-after"]) >= 1, "Retry-After")
    # Reads are not limited: subscribers poll every 1.5 s.
    check(all(listing(tx).status_code == 200 for _ in range(70)), "reads are not rate limited")


def drift_events():
    events = httpx.get(f"{ADMIN}/admin/v1/drift-events?limit=1000").json()
    events = events.get("events", events) if isinstance(events, dict) else events
    codes = {e.get("code") for e in events}
    for c in ["ERR_RELAY_TX_FULL", "ERR_QUOTE_SIGNATURE", "ERR_QUOTE_EXPIRED", "ERR_QUOTE_MALFORMED"]:
        check(c in codes, f"a drift event for {c}")
    check("9000000" not in json.dumps(events), "no message value in drift events")


if PHASE == "main":
    asyncio.run(sdk_round_trip())
    wire_and_dedup()
    caps_and_pages()
    refusals()
    rate_limit()
    drift_events()
    with open(STATE, "w") as f:
        json.dump(listing(tx_of(2)).json(), f)
    print(json.dumps({"ok": True}))
elif PHASE == "restart":
    # Kept across a restart, under the same cursors, byte for byte.
    with open(STATE) as f:
        before = json.load(f)
    check(listing(tx_of(2)).json() == before, "the relay's messages survive a restart")
    # This sidecar keeps messages for 2 s (aip2.relay_ttl): then they are gone, and the
    # same message may be kept anew under a new cursor.
    tx = tx_of(8)
    env = raw(sign("agirails.counteroffer.v1", tx))
    r = post(tx, env)
    check(r.status_code == 201, f"posted: {r.status_code}")
    cursor = int(r.json()["cursor"])
    check(cursor > max(int(m["cursor"]) for m in before["messages"]), "cursors keep growing after a restart")
    check(len(listing(tx).json()["messages"]) == 1, "listed")
    time.sleep(2.5)
    check(listing(tx).json()["messages"] == [], "gone after relay_ttl")
    check(all(m["txId"] != tx for m in inbox(CONSUMER, after=cursor - 1)), "gone from the inbox too")
    r = post(tx, env)
    check(r.status_code == 201 and int(r.json()["cursor"]) > cursor, f"kept anew: {r.status_code} {r.text}")
    print(json.dumps({"ok": True}))
elif PHASE == "full":
    # This sidecar keeps at most 5 messages (aip2.relay_max_messages), and holds more: a new
    # message is refused with Retry-After and kept nowhere; a kept one is still a duplicate.
    with open(STATE) as f:
        before = json.load(f)
    tx = tx_of(9)
    r = post(tx, raw(sign("agirails.counteroffer.v1", tx)))
    refused(r, 503, "ERR_RELAY_FULL", "a post to a full relay", tx=tx)
    check(r.headers.get("retry-after") == "60", "Retry-After on a full relay")
    kept = before["messages"][0]["envelope"]
    r = post(tx_of(2), raw(kept))
    check(r.status_code == 200 and r.json().get("duplicate") is True, f"a kept message: {r.text}")
    print(json.dumps({"ok": True}))
