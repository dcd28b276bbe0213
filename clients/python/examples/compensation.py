"""A compensation: a committed write undone within its lease's window; the sidecar sends the
staged inverse, fenced with the next epoch, and answers a compensation receipt."""
import os

import httpx
from palisade_agent import Agent

url, admin = os.environ["PALISADE_URL"], os.environ["PALISADE_ADMIN"]
vkey = httpx.get(admin + "/admin/v1/log/key").text

with Agent(url, authorization="Bearer example-agent", vkey=vkey) as agent:
    before = agent.read("/api/v2/items/4").json() if agent.read("/api/v2/items/4").status_code == 200 else None
    undo = {"method": "PUT", "path": "/api/v2/items/4", "body": {"sku": "PIN-4", "qty": 10, "warehouse": "BER-1"}}
    done = agent.write("PUT", "/api/v2/items/4", json={"sku": "PIN-4", "qty": 99, "warehouse": "BER-1"}, inverse=undo)
    print("written", agent.read("/api/v2/items/4").json()["qty"], "epoch", done.epoch)
    undone = agent.compensate(done.lease_id)
    print("compensated", undone.receipt["kind"], "epoch", undone.epoch)
    print("now", agent.read("/api/v2/items/4").json()["qty"])
