"""An agent's quote-channel endpoint built on the agirails SDK, for the proxy tests.

    python agent.py PORT KERNEL

POST /quote-channel/{chainId}/{txId}: counter-offers go to the SDK's own receive-side
handler (`QuoteChannelHandler`: its path binding, TTL, EIP-712 check and dedup); quotes and
counter-accepts to the SDK's verifiers (`QuoteBuilder.verify`, `CounterAcceptBuilder.verify`),
answered the way the handler answers (201 accepted, 401 signature, 422 rule). Every POST that
reaches it is an *effect*: its raw body is kept, so the test can tell what the sidecar let
through, byte for byte.

GET /_effects: [{"path", "body_b64"}] of every POST received, in order.
A txId of 0xeeee… answers 503 the first time (an agent that failed), then as usual.
A txId of 0xdddd… takes 1 s to answer (a repeat arrives while the first is in flight).
"""

import asyncio
import base64
import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from agirails.builders.counter_accept import CounterAcceptBuilder, CounterAcceptMessage
from agirails.builders.quote import QuoteBuilder, QuoteMessage
from agirails.errors import SignatureVerificationError
from agirails.server.quote_channel import HandlerContext, QuoteChannelHandler

KERNEL = sys.argv[2]
handler = QuoteChannelHandler({84532: KERNEL, 8453: KERNEL})
effects = []
failed_once = set()


def verify_other(kind, msg):
    try:
        if kind == "agirails.quote.v1":
            QuoteBuilder().verify(QuoteMessage.from_dict(msg), KERNEL)
        else:
            CounterAcceptBuilder().verify(CounterAcceptMessage(**msg), KERNEL)
    except SignatureVerificationError as e:
        return 401, {"accepted": False, "reason": str(e)}
    except (ValueError, TypeError, KeyError) as e:
        return 422, {"accepted": False, "reason": str(e)}
    return 201, {"accepted": True, "duplicate": False}


async def channel(request):
    raw = await request.body()
    chain, tx = request.path_params["chain"], request.path_params["tx"]
    effects.append({"path": request.url.path, "body_b64": base64.b64encode(raw).decode()})
    if tx.startswith("0xeeee") and tx not in failed_once:
        failed_once.add(tx)
        return JSONResponse({"accepted": False, "reason": "agent busy"}, status_code=503)
    if tx.startswith("0xdddd"):
        await asyncio.sleep(1.0)
    payload = json.loads(raw)
    if payload.get("type") == "agirails.counteroffer.v1":
        r = handler.handle(payload, HandlerContext(path_chain_id=int(chain), path_tx_id=tx))
        return JSONResponse(r.body, status_code=r.status)
    status, body = verify_other(payload.get("type"), payload.get("message", {}))
    return JSONResponse(body, status_code=status)


async def list_effects(_request):
    return JSONResponse(effects)


app = Starlette(routes=[
    Route("/quote-channel/{chain}/{tx}", channel, methods=["POST"]),
    Route("/_effects", list_effects, methods=["GET"]),
])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
