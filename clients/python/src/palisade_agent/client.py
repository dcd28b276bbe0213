"""`Agent` and `AsyncAgent`: an httpx client with `PalisadeAuth`, plus what an agent does
around its writes — the receipt verified, a held write's outcome, a compensation, a lease's
status. No global state: each agent owns its client and its settings."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import httpx

from .auth import LEASE, RAW, SPEC, PalisadeAuth, RetryPolicy, raise_for_refusal
from .leases import Authority, LeaseSpec, LocalSigner
from .receipts import VerifierKey, verify_receipt

RECEIPT_HEADER = "agent-commit-receipt"
ESCROW_PATH = "/.well-known/ptcl/v1/escrow/"


@dataclass
class WriteResult:
    """A write that went through (or was held and then released)."""

    response: httpx.Response
    lease: dict[str, Any] | None
    #: The receipt envelope as the sidecar answered it, and its entry once verified.
    envelope: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None
    #: A held write's final status document (`state: "released"`), when it was held.
    escrow: dict[str, Any] | None = None

    @property
    def lease_id(self) -> str | None:
        return (self.lease or {}).get("lease_id")

    @property
    def epoch(self) -> int | None:
        token = self.response.headers.get("agent-fence-token")
        if token:
            return int(token)
        entry = (self.envelope or {}).get("receipt") or {}
        return entry.get("cas_fence_epoch") or (self.lease or {}).get("cas_fence_epoch")

    @property
    def status(self) -> int:
        """The SoR's status (for a released escrow: the status the release got)."""
        if self.escrow is not None:
            return int(self.escrow.get("upstream_status") or 0)
        return self.response.status_code

    @property
    def content(self) -> bytes:
        if self.escrow is not None:
            return base64.b64decode(self.escrow.get("body_b64") or "")
        return self.response.content

    def json(self) -> Any:
        import json

        return json.loads(self.content)


@dataclass
class _Settings:
    base_url: str
    authorization: str | None = None
    leases: Authority | LocalSigner = field(default_factory=Authority)
    spec: LeaseSpec = field(default_factory=LeaseSpec)
    vkey: VerifierKey | str | None = None
    public_base: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    escrow_timeout: float | None = 60.0
    timeout: float = 10.0

    def auth(self) -> PalisadeAuth:
        return PalisadeAuth(
            self.leases,
            spec=self.spec,
            public_base=self.public_base,
            retry=self.retry,
            follow_escrow=self.escrow_timeout,
        )

    def headers(self) -> dict[str, str]:
        return {"authorization": self.authorization} if self.authorization else {}

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        inverse: dict[str, Any] | None = None,
        mode: str | None = None,
        window_ms: int | None = None,
        idempotency_key: str | None = None,
        headers: dict[str, str] | None = None,
        lease: dict[str, Any] | None = None,
        raw: bool = False,
    ) -> dict[str, Any]:
        """httpx `request()` arguments for one write: its lease spec, headers and body."""
        spec = LeaseSpec(
            mode=mode or self.spec.mode,
            window_ms=window_ms or self.spec.window_ms,
            inverse=inverse if inverse is not None else self.spec.inverse,
            trace_anchor_ref=self.spec.trace_anchor_ref,
        )
        extensions: dict[str, Any] = {SPEC: spec}
        if lease is not None:
            extensions[LEASE] = lease
        if raw:
            extensions[RAW] = True
        h = dict(headers or {})
        if idempotency_key is not None:
            h["idempotency-key"] = idempotency_key
        args: dict[str, Any] = {"method": method, "url": path, "headers": h, "extensions": extensions}
        if json is not None:
            args["json"] = json
        if content is not None:
            args["content"] = content
        return args

    def result(self, response: httpx.Response) -> WriteResult:
        lease = response.request.extensions.get(LEASE)
        escrow = None
        envelope = None
        if response.request.method == "GET" and response.request.url.path.startswith(ESCROW_PATH):
            escrow = response.json()
            envelope = escrow.get("receipt")
        elif RECEIPT_HEADER in response.headers:
            envelope = response.headers[RECEIPT_HEADER]
        elif "json" in response.headers.get("content-type", ""):
            # The lease authority's answers (a compensation) carry it in their body.
            doc = response.json()
            if isinstance(doc, dict) and isinstance(doc.get("receipt"), dict):
                envelope = doc["receipt"]
        result = WriteResult(response, lease, escrow=escrow)
        if envelope is not None:
            from .receipts import envelope_of

            result.envelope = envelope_of(envelope)
            if self.vkey is not None:
                result.receipt = verify_receipt(result.envelope, self.vkey)
        return result


class Agent:
    """A synchronous agent writing through one sidecar.

    ```python
    agent = Agent("http://127.0.0.1:8080", authorization="Bearer my-agent", vkey=VKEY)
    done = agent.write("PUT", "/api/v2/items/1", json=item, inverse=undo)
    agent.compensate(done.lease_id)
    ```
    """

    def __init__(self, base_url: str, **settings: Any) -> None:
        self.settings = _Settings(base_url, **settings)
        self.http = httpx.Client(
            base_url=base_url,
            headers=self.settings.headers(),
            auth=self.settings.auth(),
            timeout=self.settings.timeout,
        )

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def write(self, method: str, path: str, **kw: Any) -> WriteResult:
        """A leased write; raises the refusal's exception, `EscrowRejected` or
        `EscrowTimeout`; verifies the receipt when the agent has the log's key."""
        return self.settings.result(self.http.request(**self.settings.request(method, path, **kw)))

    def read(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.get(path, **kw)

    def lease(self, path: str, **spec: Any) -> dict[str, Any]:
        """A lease for a later write of `path` (sent with `write(..., lease=…)`, never
        refreshed): from the authority, or signed here after reading the resource."""
        steps = self.http.auth._lease(self.http.build_request("PUT", path), LeaseSpec(**{**self.settings.spec.__dict__, **spec}))  # type: ignore[union-attr]
        try:
            request = next(steps)
            while True:
                response = self.http.send(request, auth=None)
                response.read()
                request = steps.send(response)
        except StopIteration as done:
            return done.value[0]

    def compensate(self, lease_id: str) -> WriteResult:
        """Undoes a committed write within its lease's window (SPEC §5.4)."""
        r = self.http.post(f"/.well-known/ptcl/v1/leases/{lease_id}/compensate", extensions={RAW: True})
        raise_for_refusal(r)
        return self.settings.result(r)

    def lease_status(self, lease_id: str) -> dict[str, Any]:
        r = self.http.get(f"/.well-known/ptcl/v1/leases/{lease_id}")
        raise_for_refusal(r)
        return r.json()


class AsyncAgent:
    """`Agent` for asyncio (or trio): the same calls, awaited."""

    def __init__(self, base_url: str, **settings: Any) -> None:
        self.settings = _Settings(base_url, **settings)
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers=self.settings.headers(),
            auth=self.settings.auth(),
            timeout=self.settings.timeout,
        )

    async def __aenter__(self) -> "AsyncAgent":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def write(self, method: str, path: str, **kw: Any) -> WriteResult:
        return self.settings.result(await self.http.request(**self.settings.request(method, path, **kw)))

    async def read(self, path: str, **kw: Any) -> httpx.Response:
        return await self.http.get(path, **kw)

    async def lease(self, path: str, **spec: Any) -> dict[str, Any]:
        """As `Agent.lease`, awaited."""
        steps = self.http.auth._lease(self.http.build_request("PUT", path), LeaseSpec(**{**self.settings.spec.__dict__, **spec}))  # type: ignore[union-attr]
        try:
            request = next(steps)
            while True:
                response = await self.http.send(request, auth=None)
                await response.aread()
                request = steps.send(response)
        except StopIteration as done:
            return done.value[0]

    async def compensate(self, lease_id: str) -> WriteResult:
        r = await self.http.post(f"/.well-known/ptcl/v1/leases/{lease_id}/compensate", extensions={RAW: True})
        raise_for_refusal(r)
        return self.settings.result(r)

    async def lease_status(self, lease_id: str) -> dict[str, Any]:
        r = await self.http.get(f"/.well-known/ptcl/v1/leases/{lease_id}")
        raise_for_refusal(r)
        return r.json()
