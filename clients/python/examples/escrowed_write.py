"""An escrowed write (HUMAN_ESCROW): held by the sidecar until an operator approves it; the
agent waits for the outcome. The operator is played here by a thread calling the admin API."""
import os
import threading
import time

import httpx
from palisade_agent import Agent

url, admin = os.environ["PALISADE_URL"], os.environ["PALISADE_ADMIN"]

def operator():  # approves the first held write it sees
    while not (held := httpx.get(admin + "/admin/v1/escrow").json()["escrows"]):
        time.sleep(0.05)
    # Admin calls are JSON, body or not (a web page could not send one without a preflight).
    httpx.post(f"{admin}/admin/v1/escrow/{held[0]['escrow_id']}/approve", json={}, timeout=10)

threading.Thread(target=operator, daemon=True).start()
with Agent(url, authorization="Bearer example-agent", escrow_timeout=30) as agent:
    done = agent.write("PUT", "/api/v2/items/3", json={"sku": "WASHER-8", "qty": 500, "warehouse": "BER-1"},
                       mode="HUMAN_ESCROW", inverse={"method": "DELETE", "path": "/api/v2/items/3"})
    print("escrow", done.escrow["escrow_id"], done.escrow["state"], "upstream", done.status)
