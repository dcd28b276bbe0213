"""A leased MCP tool call with the official MCP SDK: the lease (signed with the agent's key)
and the inverse travel in `_meta`; a refusal is raised as the same exceptions as over HTTP."""
import asyncio
import os

from mcp import Client
from palisade_agent import LeaseSpec, LocalSigner
from palisade_agent.mcp import call_tool

signer = LocalSigner.from_pem(open(os.environ["AGENT_KEY"], "rb").read())
undo = {"tool": "set_stock", "arguments": {"sku": "BOLT-M8", "qty": 1200}}  # the call that undoes it


async def main():
    async with Client(os.environ["PALISADE_MCP_URL"]) as client:
        result = await call_tool(client, "set_stock", {"sku": "BOLT-M8", "qty": 1150}, signer=signer,
                                 public_base=os.environ["PALISADE_PUBLIC_BASE"], spec=LeaseSpec(inverse=undo))
        receipt = result.meta["commitReceipt"]
        print("tool result error", result.is_error, "receipt", receipt["receipt"]["kind"])

asyncio.run(main())
