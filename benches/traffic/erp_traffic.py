"""ERP traffic against the sample SoR, for recording (benches/traffic/record.sh).

    python3 erp_traffic.py BASE_URL [N]

Seeds 20 items, then sends N requests (default 400), one every 20 ms, in the proportions of an
agent working an inventory: 80 % reads (60 % one item, 20 % the list) and 20 % writes (12 %
PUT of an item's quantity, 5 % POST of a new item, 3 % DELETE). Seeded: the same sequence every
time. Standard library only.
"""

import json
import random
import sys
import time
import urllib.error
import urllib.request

base = sys.argv[1].rstrip("/")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
rng = random.Random(20261202)
items: list[str] = []


def call(method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


def new_item():
    sku = f"SKU-{rng.randrange(1000, 9999)}"
    status, doc = call("POST", "/api/v2/items", {"sku": sku, "qty": rng.randrange(0, 500), "warehouse": "BER-1"})
    if status == 201:
        items.append(doc["id"])


for _ in range(20):
    new_item()
    time.sleep(0.02)

for _ in range(n):
    roll = rng.random()
    if roll < 0.60 and items:
        call("GET", f"/api/v2/items/{rng.choice(items)}")
    elif roll < 0.80:
        call("GET", "/api/v2/items")
    elif roll < 0.92 and items:
        item = rng.choice(items)
        call("PUT", f"/api/v2/items/{item}", {"sku": f"SKU-{item}", "qty": rng.randrange(0, 500), "warehouse": "BER-1"})
    elif roll < 0.97 or len(items) < 5:
        new_item()
    else:
        call("DELETE", f"/api/v2/items/{items.pop(rng.randrange(len(items)))}")
    time.sleep(0.02)
