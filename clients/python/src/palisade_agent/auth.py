"""The httpx integration: an `httpx.Auth` flow that makes every write a leased write.

For a write (POST, PUT, PATCH, DELETE) it gets a lease for the request's target — from the
sidecar's lease authority, or signed here after reading the resource's epoch and pre-image —
and sends the write with it. On 409 `ERR_STALE_FENCE_EPOCH` it refreshes the lease under the
caller's `RetryPolicy`; by default it does not retry once the resource has changed from what
the first lease saw (the agent must read again). A 202 escrow is followed to its outcome. A
refusal is raised as its typed exception (`errors`). Reads pass through, refusals raised too.

One flow serves `httpx.Client` and `httpx.AsyncClient`: the steps are written once, without
I/O, and the two drivers send what they ask for (and sleep between escrow polls).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Generator, Union

import anyio
import httpx

from ._canon import pre_image_hash
from .errors import EscrowRejected, EscrowTimeout, StaleFence, refusal
from .leases import Authority, LeaseSpec, LocalSigner, default_inverse, encode, inverse_header

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LEASE_PATH = "/.well-known/ptcl/v1/leases"
#: Request extensions a caller may set per request (httpx `extensions=`).
SPEC = "palisade.spec"  # a LeaseSpec for this write
LEASE = "palisade.lease"  # a lease made elsewhere: sent as is, never refreshed
RAW = "palisade.raw"  # send without a lease (to see how the sidecar answers)


@dataclass(frozen=True)
class RetryPolicy:
    """How a stale fence is handled: up to `stale_fence` fresh leases; a lease whose
    pre-image differs from the first one's is used only with `on_pre_image_change`."""

    stale_fence: int = 2
    on_pre_image_change: bool = False


@dataclass(frozen=True)
class _Sleep:
    seconds: float


_Step = Generator[Union[httpx.Request, _Sleep], httpx.Response, Any]


def problem_of(response: httpx.Response) -> dict[str, Any] | None:
    """The sidecar's problem document in `response`, if it is one (`code` `ERR_…`)."""
    if "json" not in response.headers.get("content-type", ""):
        return None
    try:
        doc = response.json()
    except ValueError:
        return None
    if isinstance(doc, dict) and str(doc.get("code", "")).startswith("ERR_"):
        if "retry-after" in response.headers:
            doc["_retry_after"] = response.headers["retry-after"]
        return doc
    return None


def raise_for_refusal(response: httpx.Response) -> None:
    """Raises the typed exception for a refusal; anything else passes."""
    if response.status_code < 400 and response.status_code not in (262,):
        return
    doc = problem_of(response)
    if doc is not None:
        receipt = doc.get("receipt")
        header = response.headers.get("agent-commit-receipt")
        if receipt is None and header:
            from .receipts import envelope_of

            receipt = envelope_of(header)
        raise refusal(response.status_code, doc, receipt)


class PalisadeAuth(httpx.Auth):
    """Leases for writes, through any httpx client: `httpx.Client(auth=PalisadeAuth(...))`.

    - `leases`: `Authority()` (default) or a `LocalSigner`;
    - `spec`: the lease's recovery mode, window and inverse (per request: `extensions={SPEC: …}`);
    - `public_base`: the sidecar's `listen.public_base`, when leases must name it rather than
      the URL the request is sent to;
    - `follow_escrow`: seconds to wait for a held write's decision (`None`: answer the 202).
    """

    requires_request_body = True
    requires_response_body = True

    def __init__(
        self,
        leases: Authority | LocalSigner | None = None,
        *,
        spec: LeaseSpec | None = None,
        public_base: str | None = None,
        retry: RetryPolicy | None = None,
        follow_escrow: float | None = 60.0,
        poll: tuple[float, float] = (0.1, 2.0),
        write_methods: frozenset[str] = WRITE_METHODS,
    ) -> None:
        self.leases = leases if leases is not None else Authority()
        self.spec = spec or LeaseSpec()
        self.public_base = public_base.rstrip("/") if public_base else None
        self.retry = retry or RetryPolicy()
        self.follow_escrow = follow_escrow
        self.poll = poll
        self.write_methods = write_methods

    # ---- drivers ---------------------------------------------------------------------------

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.read()
        steps = self._flow(request)
        try:
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    step = next(steps)
                else:
                    response = yield step
                    response.read()
                    step = steps.send(response)
        except StopIteration:
            return

    async def async_auth_flow(self, request: httpx.Request):  # type: ignore[override]
        await request.aread()
        steps = self._flow(request)
        try:
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    await anyio.sleep(step.seconds)
                    step = next(steps)
                else:
                    response = yield step
                    await response.aread()
                    step = steps.send(response)
        except StopIteration:
            return

    # ---- the steps ---------------------------------------------------------------------------

    def _flow(self, request: httpx.Request) -> _Step:
        if request.method not in self.write_methods or request.extensions.get(RAW):
            response = yield request
            raise_for_refusal(response)
            return
        given = request.extensions.get(LEASE)
        spec = request.extensions.get(SPEC) or self.spec
        first_pre_image = None
        last_problem: dict[str, Any] = {}
        refreshed = 0
        while True:
            if given is not None:
                lease, inline = given, None
            else:
                lease, inline = yield from self._lease(request, spec)
            pre_image = lease.get("pre_image_state_hash")
            if first_pre_image is None:
                first_pre_image = pre_image
            elif pre_image != first_pre_image and not self.retry.on_pre_image_change:
                # The resource changed under the agent: what it meant to write may no longer
                # be right. The last 409's problem says so.
                raise StaleFence(409, {**last_problem, "_pre_image_changed": True})
            response = yield self._leased(request, lease, inline)
            doc = problem_of(response) if response.status_code == 409 else None
            if doc is not None and doc.get("code") == "ERR_STALE_FENCE_EPOCH" and given is None:
                changed = doc.get("reason") == "pre-image-mismatch"
                if refreshed < self.retry.stale_fence and (self.retry.on_pre_image_change or not changed):
                    refreshed += 1
                    last_problem = doc
                    continue
            if response.status_code == 202 and self.follow_escrow is not None and "location" in response.headers:
                response = yield from self._follow(request, response, lease)
            raise_for_refusal(response)
            return

    def target_of(self, request: httpx.Request) -> str:
        url = request.url.copy_with(fragment=None)
        if self.public_base:
            path = url.raw_path.decode("ascii")
            return self.public_base + path
        return str(url)

    @staticmethod
    def _identity(request: httpx.Request) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "cookie")}

    def _lease(self, request: httpx.Request, spec: LeaseSpec) -> _Step:
        target = self.target_of(request)
        if isinstance(self.leases, LocalSigner):
            # The epoch and the pre-image as the sidecar sees them: a read through it.
            seen = yield httpx.Request("GET", request.url, headers=self._identity(request))
            if seen.status_code >= 400 and seen.status_code not in (404, 410):
                raise_for_refusal(seen)
            epoch = int(seen.headers.get("agent-fence-token", "0") or 0)
            if spec.inverse is None:
                path = request.url.raw_path.decode("ascii")
                spec = replace(spec, inverse=default_inverse(spec.mode, path, seen.status_code, seen.content))
            lease = self.leases.lease(
                target=target,
                epoch=epoch + 1,
                pre_image_state_hash=pre_image_hash(seen.status_code, seen.content),
                spec=spec,
            )
            return lease, (inverse_header(spec.inverse) if spec.inverse is not None else None)
        base = self.leases.base_url or f"{request.url.scheme}://{request.url.netloc.decode('ascii')}"
        granted = yield httpx.Request(
            "POST",
            base.rstrip("/") + LEASE_PATH,
            headers=self._identity(request),
            json=self.leases.grant_body(target, spec),
        )
        raise_for_refusal(granted)
        if granted.status_code != 201:
            raise refusal(granted.status_code, {"code": "ERR_LEASE_REQUIRED", "detail": "the lease authority granted nothing"})
        return granted.json(), None

    @staticmethod
    def _leased(request: httpx.Request, lease: dict[str, Any], inline: str | None) -> httpx.Request:
        headers = httpx.Headers(request.headers)
        headers["agent-compensation-lease"] = encode(lease)
        if inline is not None:
            headers["agent-compensation-inverse"] = inline
        headers.pop("content-length", None)
        return httpx.Request(
            request.method,
            request.url,
            headers=headers,
            content=request.content,
            extensions={**request.extensions, LEASE: lease},
        )

    def _follow(self, request: httpx.Request, held: httpx.Response, lease: dict[str, Any]) -> _Step:
        """Polls a held write's status (`Location`, as its caller) until it is decided."""
        url = request.url.join(held.headers["location"])
        deadline = time.monotonic() + float(self.follow_escrow or 0)
        delay = self.poll[0]
        while True:
            status = yield httpx.Request("GET", url, headers=self._identity(request), extensions={LEASE: lease})
            raise_for_refusal(status)
            doc = status.json()
            state = doc.get("state")
            if state == "released":
                return status
            if state in ("rejected", "refused"):
                raise EscrowRejected(doc)
            left = deadline - time.monotonic()
            if left <= 0:
                raise EscrowTimeout(doc, str(url))
            yield _Sleep(min(delay, left))
            delay = min(delay * 2, self.poll[1])

