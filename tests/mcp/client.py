"""An MCP client written with the official Python SDK, driven by the proxy tests.

    python client.py URL MODE < steps.json

MODE is "legacy" (initialize handshake, Mcp-Session-Id, SSE replies) or "2026-07-28" (the
stateless revision). steps.json is a JSON list of steps; each prints one JSON line:

- {"op": "list"}                         -> {"tools": [names]}
- {"op": "call", "name": N, "args": {...}, "meta": {...}?}
      -> {"result": structuredContent or text} or {"error": {"code", "message", "data"}}
- {"op": "call_progress", "name": N, "args": {...}}
      -> {"result": ..., "progress_at": [seconds since the call began, per notification],
          "done_at": seconds}
"""

import asyncio
import json
import sys
import time

from mcp import Client
from mcp.shared.exceptions import MCPError


def result_of(r):
    if getattr(r, "structured_content", None) is not None:
        return r.structured_content
    return [c.text for c in r.content if getattr(c, "text", None) is not None]


async def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    steps = json.load(sys.stdin)
    async with Client(url, mode=mode, cache=None) as client:
        for step in steps:
            try:
                if step["op"] == "list":
                    tools = await client.list_tools()
                    out = {"tools": [t.name for t in tools.tools]}
                elif step["op"] == "call":
                    r = await client.call_tool(step["name"], step.get("args", {}), meta=step.get("meta"))
                    out = {"result": result_of(r), "is_error": bool(r.is_error)}
                elif step["op"] == "call_progress":
                    began = time.monotonic()
                    seen = []

                    async def progress(p, total, message):
                        seen.append(round(time.monotonic() - began, 3))

                    r = await client.call_tool(step["name"], step.get("args", {}), progress_callback=progress)
                    out = {"result": result_of(r), "progress_at": seen,
                           "done_at": round(time.monotonic() - began, 3)}
                else:
                    out = {"bad_step": step}
            except MCPError as e:
                err = e.error
                out = {"error": {"code": err.code, "message": err.message, "data": err.data}}
            print(json.dumps(out), flush=True)


asyncio.run(main())
