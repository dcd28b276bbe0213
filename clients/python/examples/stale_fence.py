"""A stale fence: a lease taken before another agent wrote is refused (409), and the agent is
told the resource changed under it: it must read again, not overwrite."""
import os

from palisade_agent import Agent, StaleFence

url = os.environ["PALISADE_URL"]
undo = {"method": "PUT", "path": "/api/v2/items/2", "body": {"sku": "NUT-M8", "qty": 10, "warehouse": "BER-1"}}

with Agent(url, authorization="Bearer agent-a") as a, Agent(url, authorization="Bearer agent-b") as b:
    early = b.lease("/api/v2/items/2", inverse=undo)  # b plans its write
    a.write("PUT", "/api/v2/items/2", json={"sku": "NUT-M8", "qty": 40, "warehouse": "BER-1"}, inverse=undo)
    try:
        b.write("PUT", "/api/v2/items/2", json={"sku": "NUT-M8", "qty": 7, "warehouse": "BER-1"}, lease=early)
    except StaleFence as stale:
        print("refused", stale.code, "current epoch", stale.current_epoch)
        print("receipt kind", stale.receipt["receipt"]["kind"])
    print("kept", a.read("/api/v2/items/2").json()["qty"])
