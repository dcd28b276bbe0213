"""An MCP client written with the official Python SDK, driven by the proxy tests.

    python client.py URL MODE < steps.json

MCP_CLIENT_HEADERS (a JSON object), when set, adds those HTTP headers to every request the
client sends (an httpx client handed to the SDK's own Streamable HTTP transport).

MODE is "legacy" (initialize handshake, Mcp-Session-Id, SSE replies) or "2026-07-28" (the
stateless revision). steps.json is a JSON list of steps; each prints one JSON line:

- {"op": "list"}                         -> {"tools": [names]}
- {"op": "list_all"}                     -> {"tools": [names], "pages": n} (following nextCursor)
- {"op": "call", "name": N, "args": {...}, "meta": {...}?}
      -> {"result": structuredContent or text, "is_error", "meta": the result's _meta}
         or {"error": {"code", "message", "data"}}
- {"op": "call_raw", "name": N, "args": {...}, "meta": {...}?, "request_state": S?}
      -> {"raw": the result as sent, interim (input_required) results included}
      S = "$last" retries with the requestState of the last interim result seen.
- {"op": "notifications"}               -> {"seen": [methods of server notifications so far]}
- {"op": "call_progress", "name": N, "args": {...}}
      -> {"result": ..., "progress_at": [seconds since the call began, per notification],
          "done_at": seconds}
"""

import asyncio
import json
import os
import sys
import time

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def result_of(r):
    if getattr(r, "structured_content", None) is not None:
        return r.structured_content
    return [c.text for c in r.content if getattr(c, "text", None) is not None]


async def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    steps = json.load(sys.stdin)
    notes = []
    last_state = None

    async def on_message(m):
        method = getattr(m, "method", None) or getattr(getattr(m, "root", None), "method", None)
        if method:
            notes.append(method)

    extra = json.loads(os.environ.get("MCP_CLIENT_HEADERS") or "{}")
    server = streamable_http_client(url, http_client=create_mcp_http_client(headers=extra)) if extra else url
    async with Client(server, mode=mode, cache=None, message_handler=on_message) as client:
        for step in steps:
            try:
                if step["op"] == "list":
                    tools = await client.list_tools()
                    out = {"tools": [t.name for t in tools.tools]}
                elif step["op"] == "list_all":
                    names, cursor, pages = [], None, 0
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        pages += 1
                        names += [t.name for t in page.tools]
                        cursor = page.next_cursor
                        if not cursor or pages > 20:
                            break
                    out = {"tools": names, "pages": pages}
                elif step["op"] == "call":
                    r = await client.call_tool(step["name"], step.get("args", {}), meta=step.get("meta"))
                    out = {"result": result_of(r), "is_error": bool(r.is_error), "meta": r.meta}
                elif step["op"] == "call_raw":
                    state = step.get("request_state")
                    if state == "$last":
                        state = last_state
                    r = await client.session.call_tool(
                        step["name"], step.get("args", {}), meta=step.get("meta"),
                        request_state=state, allow_input_required=True)
                    last_state = getattr(r, "request_state", None) or last_state
                    out = {"raw": r.model_dump(by_alias=True, mode="json", exclude_none=True)}
                elif step["op"] == "notifications":
                    await asyncio.sleep(0.5)
                    out = {"seen": notes}
                elif step["op"] == "call_progress":
                    began = time.monotonic()
                    ticks = []

                    async def progress(p, total, message):
                        ticks.append(round(time.monotonic() - began, 3))

                    r = await client.call_tool(step["name"], step.get("args", {}), progress_callback=progress)
                    out = {"result": result_of(r), "progress_at": ticks,
                           "done_at": round(time.monotonic() - began, 3)}
                else:
                    out = {"bad_step": step}
            except MCPError as e:
                err = e.error
                out = {"error": {"code": err.code, "message": err.message, "data": err.data}}
            print(json.dumps(out), flush=True)


asyncio.run(main())
