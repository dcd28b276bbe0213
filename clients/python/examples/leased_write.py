"""A leased write: the sidecar's lease authority picks the epoch, hashes the pre-image and
stages the inverse; the receipt is verified against the log's key."""
import os

import httpx
from palisade_agent import Agent

url, admin = os.environ["PALISADE_URL"], os.environ["PALISADE_ADMIN"]
vkey = httpx.get(admin + "/admin/v1/log/key").text  # the operator publishes it

item = {"sku": "BOLT-M8", "qty": 1150, "warehouse": "BER-1"}
undo = {"method": "PUT", "path": "/api/v2/items/1", "body": {"sku": "BOLT-M8", "qty": 1200, "warehouse": "BER-1"}}

with Agent(url, authorization="Bearer example-agent", vkey=vkey) as agent:
    done = agent.write("PUT", "/api/v2/items/1", json=item, inverse=undo)
    print("status", done.status, "epoch", done.epoch)
    print("receipt", done.receipt["kind"], done.receipt["receipt_id"], "verified")
    print("stored", agent.read("/api/v2/items/1").json()["qty"])
