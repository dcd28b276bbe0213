"""The negotiation relay on three sidecars sharing one PostgreSQL database (run by
tests/postgres.rs): they serve one relay. Messages signed by the agirails SDK.

    python relay_replicas.py URL_A URL_B URL_C

Exits non-zero with the first failed expectation.
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

A, B, C = sys.argv[1:4]
BASE = "/api/v1/negotiations"
CONSUMER = sdk.did(sdk.CONSUMER_KEY)
_nonces = itertools.count(50_000)
_ips = (f"198.51.{a}.{b}" for a, b in itertools.product(range(100), range(1, 255)))


def tx_of(n):
    return "0x" + f"{0xfeed0000 + n:064x}"


def sign(kind, tx, **kw):
    return sdk.sign(kind, nonce=next(_nonces), tx=tx, **kw)


def typed(envelope):
    if envelope["type"] == "agirails.quote.v1":
        return NegotiationMessage(type=envelope["type"], message=QuoteMessage.from_dict(envelope["message"]))
    return _wire_to_envelope(envelope)


def listing(base, tx):
    r = httpx.get(f"{base}{BASE}/{tx}/messages", timeout=30)
    check(r.status_code == 200, f"list: {r.status_code} {r.text}")
    return r.json()["messages"]


def channel(base):
    return RelayChannel(RelayChannelConfig(
        kernel_address_by_chain_id={84532: sdk.KERNEL}, base_url=base, poll_interval_ms=50,
        allow_insecure_targets=True,
        http_client=httpx.AsyncClient(headers={"x-forwarded-for": "198.18.2.1"}, timeout=30)))


async def posted_on_one_delivered_by_another():
    tx = tx_of(1)
    envs = [sign("agirails.quote.v1", tx),
            sign("agirails.counteroffer.v1", tx, justification=False),
            sign("agirails.counteraccept.v1", tx)]
    got = []
    poster, watcher = channel(A), channel(B)
    watcher.subscribe_tx_id(tx, lambda d: got.append(d))
    for e in envs:
        await poster.post(tx, typed(e))
    deadline = time.time() + 10
    while time.time() < deadline and len(got) < 3:
        await asyncio.sleep(0.05)
    await poster.close()
    await watcher.close()
    check([d.envelope.type for d in got] == [e["type"] for e in envs],
          f"posted on A, delivered (SDK-verified) on B: {[d.envelope.type for d in got]}")
    r = httpx.post(f"{C}{BASE}/{tx}/messages", content=raw(envs[1]),
                   headers={"content-type": "application/json"})
    check(r.status_code == 200 and r.json().get("duplicate") is True, f"a duplicate at C: {r.text}")


async def the_cap_holds_across_replicas():
    tx = tx_of(2)
    bodies = [raw(sign("agirails.counteroffer.v1", tx)) for _ in range(60)]
    async with httpx.AsyncClient(timeout=30) as c:
        async def one(i, body):
            base = (A, B, C)[i % 3]
            return await c.post(f"{base}{BASE}/{tx}/messages", content=body,
                                headers={"content-type": "application/json", "x-forwarded-for": next(_ips)})
        rs = await asyncio.gather(*[one(i, b) for i, b in enumerate(bodies)])
    codes = sorted(r.status_code for r in rs)
    others = [r.text for r in rs if r.status_code not in (201, 429)]
    check(codes.count(201) == 50 and codes.count(429) == 10, f"60 at once on three replicas: {codes} {others[:2]}")
    check(all(r.json().get("code") == "ERR_RELAY_TX_FULL" for r in rs if r.status_code == 429), "the cap's code")
    lists = [listing(base, tx) for base in (A, B, C)]
    check(lists[0] == lists[1] == lists[2] and len(lists[0]) == 50, "every replica lists the same 50")
    cursors = [int(m["cursor"]) for m in lists[0]]
    check(cursors == sorted(set(cursors)), "cursors rise")


async def a_poller_misses_nothing():
    """Posts to many transactions at once on three replicas while a poller pages an inbox on
    another: cursors are handed out in commit order, so paging by `after` misses nothing."""
    txs = [tx_of(100 + i) for i in range(30)]
    seen, after, stop = [], "0", False

    async def poll():
        nonlocal after
        async with httpx.AsyncClient(timeout=30) as c:
            while True:
                done = stop
                r = await c.get(f"{B}{BASE}/inbox/{CONSUMER}?after={after}")
                page = r.json()["messages"]
                seen.extend(page)
                if page:
                    after = page[-1]["cursor"]
                elif done:
                    return

    async def post_all():
        async with httpx.AsyncClient(timeout=30) as c:
            async def one(i, tx):
                body = raw(sign("agirails.counteroffer.v1", tx))
                base = (A, C)[i % 2]
                r = await c.post(f"{base}{BASE}/{tx}/messages", content=body,
                                 headers={"content-type": "application/json", "x-forwarded-for": next(_ips)})
                check(r.status_code == 201, f"post: {r.status_code}")
            await asyncio.gather(*[one(i, tx) for i, tx in enumerate(txs * 3)])

    poller = asyncio.ensure_future(poll())
    await post_all()
    stop = True
    await poller
    mine = [m for m in seen if m["txId"] in txs]
    check(len(mine) == 90, f"the poller saw every message once: {len(mine)}")
    check(len({m["cursor"] for m in seen}) == len(seen), "no message twice")


asyncio.run(posted_on_one_delivered_by_another())
asyncio.run(the_cap_holds_across_replicas())
asyncio.run(a_poller_misses_nothing())
print(json.dumps({"ok": True}))
