"""Eight agents write one resource at once. Each is either committed (its receipt verified, its
epoch its own) or told its fence is stale; none is lost silently, and what the SoR holds is
the last committed write's."""

from __future__ import annotations

import asyncio
import threading
import uuid

import httpx

from palisade_agent import Agent, AsyncAgent, RetryPolicy, StaleFence

N = 8


def body(n: int) -> dict:
    return {"sku": "BOLT-M8", "qty": 100 + n, "warehouse": "BER-1"}


def test_eight_agents_default_policy(demo):
    path = f"/api/v2/items/race-{uuid.uuid4().hex[:8]}"
    undo = {"method": "DELETE", "path": path}
    outcomes: list = [None] * N
    start = threading.Barrier(N)

    def agent(n: int) -> None:
        with Agent(demo.url, authorization=f"Bearer racer-{n}", vkey=demo.vkey) as a:
            start.wait()
            try:
                outcomes[n] = a.write("PUT", path, json=body(n), inverse=undo)
            except StaleFence as e:
                outcomes[n] = e

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = {n: o for n, o in enumerate(outcomes) if not isinstance(o, StaleFence)}
    stale = [o for o in outcomes if isinstance(o, StaleFence)]
    assert len(committed) + len(stale) == N, outcomes  # every agent has an answer
    assert committed, "at least one write goes through"
    epochs = [o.receipt["cas_fence_epoch"] for o in committed.values()]
    assert len(set(epochs)) == len(epochs), f"each committed write has its own epoch: {epochs}"
    assert all(o.receipt["kind"] == "commit" for o in committed.values())
    for e in stale:  # told, with a receipt, and why: the resource changed under it
        assert e.receipt is not None and e.current_epoch is not None
    assert demo.epoch(path) == max(epochs) == len(committed)
    last = max(committed, key=lambda n: committed[n].receipt["cas_fence_epoch"])
    assert httpx.get(demo.url + path).json()["qty"] == 100 + last


def test_eight_async_agents_that_may_write_over_changes(demo):
    """With `on_pre_image_change` (the agent's write does not depend on what it read), every
    one of the eight goes through, in turn, each with the next epoch."""
    path = f"/api/v2/items/race-{uuid.uuid4().hex[:8]}"
    undo = {"method": "DELETE", "path": path}
    policy = RetryPolicy(stale_fence=N, on_pre_image_change=True)

    async def agent(n: int):
        async with AsyncAgent(demo.url, authorization=f"Bearer racer-{n}", vkey=demo.vkey, retry=policy) as a:
            return await a.write("PUT", path, json=body(n), inverse=undo)

    async def all_of_them():
        return await asyncio.gather(*(agent(n) for n in range(N)))

    done = asyncio.run(all_of_them())
    epochs = sorted(r.receipt["cas_fence_epoch"] for r in done)
    assert epochs == list(range(1, N + 1)), epochs
    assert demo.epoch(path) == N
