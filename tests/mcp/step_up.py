"""The official MCP Python SDK's OAuth client against a 403 from the sidecar (SPEC §13, issue
58): the client holds an access token that does not grant the tool it calls. The refusal says
`error="insufficient_scope"` with `scope` and `resource_metadata`, and the SDK's
OAuthClientProvider steps up as MCP's authorization spec says: it discovers the protected
resource metadata at the URL the challenge named, then the authorization server's.

    python step_up.py URL TOKEN TOOL ARGS_JSON

Prints one JSON line: {"requests": [[method, url, status or null], ...], "error": "..."},
every request the SDK's HTTP client sent, in order (the step-up's discovery included; the
authorization server is not reachable in the test, which ends the flow there).
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken


class Storage:
    """A client that was authorized before: it holds a token and its registration."""

    def __init__(self, token):
        self.tokens = OAuthToken(access_token=token, token_type="Bearer")

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return OAuthClientInformationFull(client_id="agent-7", redirect_uris=["http://localhost:9/callback"])

    async def set_client_info(self, info):
        pass


async def main() -> None:
    url, token, tool, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    seen = []

    async def on_request(request):
        seen.append([request.method, str(request.url), None])

    async def on_response(response):
        for entry in reversed(seen):
            if entry[1] == str(response.request.url) and entry[2] is None:
                entry[2] = response.status_code
                break

    async def redirect(_url):
        raise RuntimeError("the test has no browser")

    async def callback():
        raise RuntimeError("the test has no browser")

    auth = OAuthClientProvider(
        url,
        OAuthClientMetadata(redirect_uris=["http://localhost:9/callback"], client_name="palisade step-up test"),
        Storage(token),
        redirect_handler=redirect,
        callback_handler=callback,
    )
    http = create_mcp_http_client(auth=auth)
    http.event_hooks = {"request": [on_request], "response": [on_response]}
    error = None
    try:
        async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None) as client:
            await client.call_tool(tool, args)
    except BaseException as e:  # the flow ends where the test's network does
        error = f"{type(e).__name__}: {e}"
    print(json.dumps({"requests": seen, "error": error}), flush=True)


asyncio.run(main())
