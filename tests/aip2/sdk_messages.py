"""AIP-2.1 messages signed by the agirails SDK (PyPI), the independent signer of the tests.

`python sdk_messages.py vectors` prints one of each message type, signed with fixed test keys
(`TEST ONLY` below) at a fixed time, for the policy crate's unit tests
(policy/tests/vectors/aip2_sdk.json). The integration test imports `sign()`.
"""

import json
import sys
import time
from unittest import mock

from eth_account import Account

from agirails.builders.quote import QuoteBuilder, QuoteParams
from agirails.builders.counter_offer import (
    CounterOfferBuilder,
    CounterOfferJustification,
    CounterOfferParams,
    MessageNonceManager,
)
from agirails.builders.counter_accept import CounterAcceptBuilder, CounterAcceptParams

# TEST ONLY keys: keccak-free, fixed so vectors are reproducible. Never used anywhere else.
PROVIDER_KEY = "0x" + "11" * 32
CONSUMER_KEY = "0x" + "22" * 32
KERNEL = "0x9d25A874f046185d9237Cd4954C88D2B74B0021b"
TX = "0x" + "ab" * 32
QUOTE_HASH = "0x" + "cd" * 32


def check(cond, what):
    """The scenarios' expectation: exits non-zero with what failed."""
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def logged(envelope):
    """A receipt as a client gets it (SPEC §5.5): `{receipt, index, inclusion, checkpoint}`.
    The inclusion proof is checked up to the checkpoint's root by `tests/log/verify_log.py`
    (RFC 9162, written apart from the sidecar); the checkpoint's signature is the log tests'
    to check. The receipt."""
    import base64
    import os
    import rfc8785
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "log"))
    import verify_log
    check(isinstance(envelope, dict) and set(envelope) == {"receipt", "index", "inclusion", "checkpoint"},
          f"a receipt envelope: {envelope}")
    body = envelope["checkpoint"].split("\n")
    size, root = int(body[1]), base64.b64decode(body[2])
    proof = [base64.b64decode(h) for h in envelope["inclusion"]]
    leaf = verify_log.leaf_hash(rfc8785.dumps(envelope["receipt"]))
    check(verify_log.verify_inclusion(envelope["index"], size, leaf, proof, root),
          f"the receipt's inclusion proof leads to its checkpoint's root: {envelope}")
    return envelope["receipt"]


def raw(envelope):
    """An envelope as compact JSON bytes."""
    return json.dumps(envelope, separators=(",", ":")).encode()


def respell_signature(envelope, low_v=False, upper=False):
    """The same signed message with its signature spelled another way: `v` as 0/1 instead of
    27/28 (eth-account writes 27/28; ecrecover takes both), and/or the hex in upper case."""
    e = json.loads(json.dumps(envelope))
    sig = e["message"]["signature"]
    rs, v = sig[2:130], int(sig[130:], 16)
    if low_v:
        v -= 27
    hx = f"{rs}{v:02x}"
    e["message"]["signature"] = "0x" + (hx.upper() if upper else hx)
    return e


def did(key, chain=84532):
    return f"did:ethr:{chain}:{Account.from_key(key).address}"


class Nonces:
    """A nonce manager that hands out what the caller asks for."""

    def __init__(self, n):
        self.n = n

    def get_next_nonce(self, _t):
        return self.n

    def record_nonce(self, _t, _n):
        pass


def sign(kind, nonce=1, chain=84532, tx=TX, expires_in=3600, at=None, signer=None, kernel=KERNEL,
         amount="7500000", justification=True):
    """One envelope {type, message} signed by the SDK's own builder."""
    now = int(time.time()) if at is None else at
    provider, consumer = did(PROVIDER_KEY, chain), did(CONSUMER_KEY, chain)
    with mock.patch("time.time", return_value=float(now)):
        if kind == "agirails.quote.v1":
            key = signer or PROVIDER_KEY
            b = QuoteBuilder(account=Account.from_key(key), nonce_manager=Nonces(nonce))
            m = b.build(QuoteParams(
                tx_id=tx, provider=provider, consumer=consumer, quoted_amount=amount,
                original_amount="5000000", max_price="10000000", chain_id=chain,
                kernel_address=kernel, expires_at=now + expires_in,
                justification={"reason": "larger dataset", "computeCost": 2.5} if justification else None,
            ))
        elif kind == "agirails.counteroffer.v1":
            key = signer or CONSUMER_KEY
            b = CounterOfferBuilder(private_key=key, nonce_manager=Nonces(nonce))
            m = b.build(CounterOfferParams(
                txId=tx, consumer=consumer, provider=provider, quoteAmount="7500000",
                counterAmount="6000000", maxPrice="10000000", inReplyTo=QUOTE_HASH,
                chainId=chain, kernelAddress=kernel, expiresAt=now + expires_in,
                justification=CounterOfferJustification(reason="market rate", market_rate=5.5) if justification else None,
            ))
        else:
            key = signer or PROVIDER_KEY
            b = CounterAcceptBuilder(private_key=key, nonce_manager=Nonces(nonce))
            m = b.build(CounterAcceptParams(
                txId=tx, provider=provider, consumer=consumer, acceptedAmount="6000000",
                inReplyTo=QUOTE_HASH, chainId=chain, kernelAddress=kernel,
            ))
    return {"type": kind, "message": m.to_dict()}


if __name__ == "__main__" and sys.argv[1:] == ["vectors"]:
    at = 1_800_000_000
    out = {
        "note": "Signed by the agirails SDK 4.8.0 (tests/aip2/sdk_messages.py vectors) with TEST ONLY keys",
        "kernel": KERNEL,
        "at": at,
        "provider_address": Account.from_key(PROVIDER_KEY).address,
        "consumer_address": Account.from_key(CONSUMER_KEY).address,
        "messages": [sign(k, at=at) for k in
                     ("agirails.quote.v1", "agirails.counteroffer.v1", "agirails.counteraccept.v1")],
    }
    # The quote as the SDK's RelayChannel posts it (its dataclass as a dict, snake_case).
    from agirails.negotiation.negotiation_channel import NegotiationMessage, _envelope_to_wire
    from agirails.builders.quote import QuoteMessage as _QM
    out["relay_quote"] = _envelope_to_wire(NegotiationMessage(
        type="agirails.quote.v1", message=_QM.from_dict(out["messages"][0]["message"])))
    # The SDK's own verifiers accept them (its verify() reads the clock: pin it).
    with mock.patch("time.time", return_value=float(at)):
        from agirails.builders.quote import QuoteMessage
        from agirails.server.quote_channel import _parse_counter_offer
        assert QuoteBuilder().verify(QuoteMessage.from_dict(out["messages"][0]["message"]), KERNEL)
        assert CounterOfferBuilder().verify(_parse_counter_offer(out["messages"][1]["message"]), KERNEL)
    print(json.dumps(out, indent=2))
