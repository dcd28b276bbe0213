"""The quote-channel guard end to end (run by tests/it/aip2.rs): messages signed by the agirails
SDK, sent with its own client and with httpx, through palisade to tests/aip2/agent.py.

    python scenario.py main|restart PALISADE_URL AGENT_URL ADMIN_URL STATE_FILE

Exits non-zero with the first failed expectation. Every refusal is checked for its status,
code, the SDK's `accepted: false`, a rejection receipt, and that the agent saw nothing.
"""

import asyncio
import base64
import json
import sys
import time

import httpx

from agirails.server.quote_channel import QuoteChannelClient, QuoteChannelClientConfig
from agirails.builders.counter_offer import CounterOfferMessage
from agirails.server.quote_channel import _parse_counter_offer
from agirails.builders.quote import QuoteMessage

import sdk_messages as sdk
from sdk_messages import check, raw

PHASE, PAL, AGENT, ADMIN, STATE = sys.argv[1:6]
QC = "/quote-channel"
TX_REPLAY = "0x" + "a1" * 32


def path(chain, tx):
    return f"{QC}/{chain}/{tx}"


def effects():
    return httpx.get(f"{AGENT}/_effects").json()


def b64json(header):
    pad = "=" * (-len(header) % 4)
    return json.loads(base64.urlsafe_b64decode(header + pad))


def post(body, chain=84532, tx=sdk.TX, client_ip="192.0.2.1", url_path=None, **kw):
    headers = {"content-type": "application/json", "x-forwarded-for": client_ip}
    return httpx.post(f"{PAL}{url_path or path(chain, tx)}", content=body, headers=headers,
                      timeout=30, **kw)


def refused(resp, status, code, what):
    before = len(effects())
    check(resp.status_code == status, f"{what}: status {resp.status_code} != {status}: {resp.text}")
    p = resp.json()
    check(resp.headers["content-type"].startswith("application/problem+json"), f"{what}: problem+json")
    check(p.get("code") == code, f"{what}: code {p.get('code')} != {code}")
    check(p.get("accepted") is False and p.get("reason"), f"{what}: the SDK's accepted/reason members")
    if code != "ERR_RATE_LIMITED":
        receipt = sdk.logged(p.get("receipt"))
        check(receipt.get("kind") == "rejection", f"{what}: rejection receipt")
        check(receipt.get("code") == code, f"{what}: receipt names the code")
    check(len(effects()) == before, f"{what}: the agent saw it")
    return p


def sdk_client_path():
    """The SDK's own client: a quote and a counter-offer, accepted by the agent's SDK code."""
    client = QuoteChannelClient(QuoteChannelClientConfig(allow_insecure_targets=True))
    quote = sdk.sign("agirails.quote.v1", nonce=1)
    counter = sdk.sign("agirails.counteroffer.v1", nonce=1)
    n = len(effects())
    asyncio.run(client.send_quote(PAL, QuoteMessage.from_dict(quote["message"])))
    asyncio.run(client.send_counter(PAL, _parse_counter_offer(counter["message"])))
    got = effects()[n:]
    check(len(got) == 2, "the SDK client's two messages each reached the agent once")
    check(json.loads(base64.b64decode(got[0]["body_b64"])) == quote, "the quote as the SDK sent it")
    check(json.loads(base64.b64decode(got[1]["body_b64"])) == counter, "the counter as the SDK sent it")


def byte_for_byte_and_receipt():
    env = sdk.sign("agirails.counteraccept.v1", nonce=7)
    body = json.dumps(env, indent=1).encode()  # a spelling of our own: passed as sent
    n = len(effects())
    r = post(body)
    check(r.status_code == 201, f"counter-accept delivered: {r.status_code} {r.text}")
    check(base64.b64decode(effects()[n]["body_b64"]) == body, "the agent got the exact bytes")
    receipt = sdk.logged(b64json(r.headers["agent-commit-receipt"]))
    check(receipt["kind"] == "delivery" and receipt["outcome"] == "agirails.counteraccept.v1",
          f"a delivery receipt: {receipt}")
    check(receipt["request_digest"].startswith("eip712:0x"), "the receipt names the signed digest")


async def replay_100():
    """Seed §8.4: the same signed POST 100× → one effect, 99 cached idempotent replies.
    Returns the body, for the restart phase."""
    env = sdk.sign("agirails.counteroffer.v1", nonce=2, tx=TX_REPLAY)
    body = raw(env)
    n = len(effects())
    async with httpx.AsyncClient(timeout=30) as c:
        async def one(i):
            return await c.post(f"{PAL}{path(84532, TX_REPLAY)}", content=body,
                                headers={"content-type": "application/json",
                                         "x-forwarded-for": f"198.18.0.{i}"})
        rs = await asyncio.gather(*[one(i) for i in range(100)])
    got = [e for e in effects()[n:]]
    check(len(got) == 1, f"100 copies, {len(got)} effects")
    statuses = sorted(r.status_code for r in rs)
    check(statuses.count(201) == 1 and statuses.count(200) == 99, f"statuses {statuses}")
    first = next(r for r in rs if r.status_code == 201)
    for r in rs:
        check(r.json() == first.json(), "every copy got the first reply's body")
    # The agent's own dedup would have said duplicate: it never had to.
    check(first.json() == {"accepted": True, "duplicate": False}, f"first reply {first.json()}")
    return body


async def in_flight_repeat():
    """A repeat that arrives while the first copy is still with a slow agent waits for it."""
    tx = "0x" + "dd" * 32
    body = raw(sdk.sign("agirails.quote.v1", nonce=3, tx=tx))
    n = len(effects())
    async with httpx.AsyncClient(timeout=30) as c:
        async def one(delay):
            await asyncio.sleep(delay)
            return await c.post(f"{PAL}{path(84532, tx)}", content=body,
                                headers={"content-type": "application/json"})
        a, b = await asyncio.gather(one(0), one(0.3))
    check(len(effects()) - n == 1, "the in-flight repeat was not forwarded")
    check(sorted([a.status_code, b.status_code]) == [200, 201], f"{a.status_code} {b.status_code}")
    check(a.json() == b.json(), "the repeat got the first's reply")


def refusals():
    quote = sdk.sign("agirails.quote.v1", nonce=4)
    other_tx = "0x" + "bb" * 32
    refused(post(raw(quote), tx=other_tx), 400, "ERR_QUOTE_CHANNEL", "txId A posted to …/B")
    refused(post(raw(quote), chain=8453), 400, "ERR_QUOTE_CHANNEL", "chainId 84532 posted to …/8453/…")
    mainnet = sdk.sign("agirails.quote.v1", nonce=4, chain=8453)
    refused(post(raw(mainnet), chain=84532), 400, "ERR_QUOTE_CHANNEL", "chainId 8453 posted to …/84532/…")
    refused(post(raw(mainnet), chain=8453), 400, "ERR_QUOTE_CHAIN_UNKNOWN", "a chain with no kernel")
    now = int(time.time())
    expired = sdk.sign("agirails.quote.v1", nonce=5, at=now - 3660, expires_in=3600)
    check(expired["message"]["expiresAt"] == now - 60, "expiresAt = now - 60")
    refused(post(raw(expired)), 410, "ERR_QUOTE_EXPIRED", "expiresAt = now - 60")
    forged = json.loads(json.dumps(quote))
    forged["message"]["quotedAmount"] = "9000000"
    refused(post(raw(forged)), 401, "ERR_QUOTE_SIGNATURE", "a forged amount")
    by_provider = sdk.sign("agirails.counteroffer.v1", nonce=6, signer=sdk.PROVIDER_KEY)
    refused(post(raw(by_provider)), 401, "ERR_QUOTE_SIGNATURE", "a counter-offer signed by the provider")
    wrong_kernel = sdk.sign("agirails.quote.v1", nonce=8, kernel="0x" + "42" * 20)
    refused(post(raw(wrong_kernel)), 401, "ERR_QUOTE_SIGNATURE", "signed for another kernel")
    extra = json.loads(json.dumps(quote))
    extra["message"]["note"] = "x"
    refused(post(raw(extra)), 400, "ERR_QUOTE_MALFORMED", "a member the schema does not have")
    refused(post(b"{not json"), 400, "ERR_QUOTE_MALFORMED", "not JSON")
    refused(post(b"x" * (70 << 10)), 413, "ERR_BODY_TOO_LARGE", "a 70 KiB body")
    # Another spelling of the channel, a method, a path shape: refused, never forwarded.
    refused(post(raw(quote), url_path=f"/QUOTE-CHANNEL/84532/{sdk.TX}"), 400, "ERR_QUOTE_CHANNEL", "upper-case prefix")
    refused(post(raw(quote), url_path=f"{QC}/84532/{sdk.TX}/x"), 400, "ERR_QUOTE_CHANNEL", "a longer path")
    r = httpx.put(f"{PAL}{path(84532, sdk.TX)}", content=raw(quote))
    refused(r, 405, "ERR_METHOD_NOT_ALLOWED", "PUT on the channel")
    check(r.headers.get("allow") == "POST", "405 says Allow: POST")
    # A used nonce with another body: never forwarded, even though it is validly signed.
    first = sdk.sign("agirails.quote.v1", nonce=9, amount="7500000")
    second = sdk.sign("agirails.quote.v1", nonce=9, amount="8000000")
    check(post(raw(first)).status_code == 201, "first message under nonce 9")
    refused(post(raw(second)), 409, "ERR_QUOTE_NONCE_REUSED", "a replayed nonce with a changed body")
    # The first message with its signature respelled (v = 0/1, upper-case hex) is a repeat of
    # it: answered with the stored reply, not forwarded again, not a nonce conflict (issue 44).
    n = len(effects())
    stored = post(raw(first), client_ip="192.0.2.77")
    for low_v, upper in [(True, False), (False, True)]:
        r = post(raw(sdk.respell_signature(first, low_v=low_v, upper=upper)), client_ip="192.0.2.77")
        check(r.status_code == stored.status_code == 200 and r.json() == stored.json(),
              f"respelled signature (v low {low_v}, upper {upper}): {r.status_code} {r.text}")
    check(len(effects()) == n, "a respelled signature was forwarded again")
    # The same signer's DID spelled without its chain is the same nonce space.
    respelled = json.loads(json.dumps(second))
    respelled["message"]["provider"] = "did:ethr:" + respelled["message"]["provider"].split(":")[-1].lower()
    r = post(raw(respelled))
    check(r.status_code in (401, 409), f"a respelled DID does not open the nonce again: {r.status_code}")


def agent_failure_is_not_cached():
    tx = "0x" + "ee" * 32
    body = raw(sdk.sign("agirails.quote.v1", nonce=10, tx=tx))
    n = len(effects())
    r1 = post(body, tx=tx)
    check(r1.status_code == 503, f"the agent's 503 passed on: {r1.status_code}")
    r2 = post(body, tx=tx)
    check(r2.status_code == 201, f"the retry delivered: {r2.status_code}")
    check(len(effects()) - n == 2, "a failed delivery is retried, not replayed")


def away_from_a_minute_boundary():
    """The limiter's windows are whole minutes: a burst that straddles one is counted with
    the previous minute's weight, so start each burst well inside one."""
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)


def rate_limits():
    # Behind a trusted proxy (127.0.0.1): keyed by X-Forwarded-For.
    body = b"{}"
    away_from_a_minute_boundary()
    statuses = [post(body, client_ip="203.0.113.50").status_code for _ in range(60)]
    check(statuses == [400] * 60, f"60 requests in a minute pass the limit: {set(statuses)}")
    r = post(body, client_ip="203.0.113.50")
    refused(r, 429, "ERR_RATE_LIMITED", "the 61st request in a minute")
    check(int(r.headers["retry-after"]) >= 1, "Retry-After")
    check(post(body, client_ip="203.0.113.51").status_code == 400, "another client has its own quota")
    # From an untrusted peer (127.0.0.2) a forged X-Forwarded-For changes nothing.
    away_from_a_minute_boundary()
    t = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=t) as c:
        codes = [c.post(f"{PAL}{path(84532, sdk.TX)}", content=body,
                        headers={"x-forwarded-for": f"203.0.113.{i}"}).status_code for i in range(61)]
    check(codes[-1] == 429 and codes[:60].count(429) == 0, f"spoofed XFF from an untrusted peer: {codes[-3:]}")


def drift_events_hold_no_values():
    events = httpx.get(f"{ADMIN}/admin/v1/drift-events?limit=1000").json()
    events = events.get("events", events) if isinstance(events, dict) else events
    codes = {e.get("code") for e in events}
    for c in ["ERR_QUOTE_CHANNEL", "ERR_QUOTE_EXPIRED", "ERR_QUOTE_SIGNATURE", "ERR_QUOTE_NONCE_REUSED",
              "ERR_QUOTE_MALFORMED", "ERR_QUOTE_CHAIN_UNKNOWN", "ERR_RATE_LIMITED"]:
        check(c in codes, f"a drift event for {c}")
    text = json.dumps(events)
    for secret in ["9000000", "8000000", sdk.did(sdk.PROVIDER_KEY).split(":")[-1].lower(),
                   sdk.did(sdk.PROVIDER_KEY).split(":")[-1]]:
        check(secret not in text, "no message value in drift events")


if PHASE == "main":
    sdk_client_path()
    byte_for_byte_and_receipt()
    with open(STATE, "wb") as f:
        f.write(asyncio.run(replay_100()))
    asyncio.run(in_flight_repeat())
    refusals()
    agent_failure_is_not_cached()
    rate_limits()
    drift_events_hold_no_values()
    print(json.dumps({"ok": True, "effects": len(effects())}))
elif PHASE == "standalone":
    # `[aip2]` without PTCL enforcement (issue 37): the guard, its nonce store and receipts
    # work as with it; every other request goes to the agent as it is, no lease asked.
    byte_for_byte_and_receipt()
    refusals()
    n = len(effects())
    r = httpx.post(f"{PAL}/orders", content=b'{"sku":"x"}',
                   headers={"content-type": "application/json"}, timeout=30)
    check(r.status_code == 404 and "ERR_" not in r.text,
          f"a plain POST reaches the agent unleased (its own 404): {r.status_code} {r.text}")
    check("agent-fence-token" not in r.headers and "agent-commit-receipt" not in r.headers,
          "no PTCL headers on a request PTCL does not enforce")
    check(len(effects()) == n, "a plain POST is not a channel effect")
    print(json.dumps({"ok": True, "effects": len(effects())}))
elif PHASE == "restart":
    # The nonce store is durable: after a restart the same message is still a replay.
    with open(STATE, "rb") as f:
        body = f.read()
    n = len(effects())
    r = post(body, tx=TX_REPLAY, client_ip="192.0.2.99")
    check(r.status_code == 200, f"after a restart: {r.status_code} {r.text}")
    check(len(effects()) == n, "after a restart the replay was not forwarded")
    print(json.dumps({"ok": True}))
