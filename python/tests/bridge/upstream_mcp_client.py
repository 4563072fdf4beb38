"""The official MCP SDK client of the upstream venv (``mcp`` 1.x) against ``/mcp``.

``python upstream_mcp_client.py URL`` prints a JSON object; used by ``test_interop.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url: str) -> dict[str, Any]:
    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        r = await session.call_tool("echo_with_length", {"message": "mcp"})
        e = await session.call_tool("echo_message", {"message": "x"})
        return {
            "server": init.serverInfo.name,
            "protocol": init.protocolVersion,
            "tools": sorted(t.name for t in tools.tools),
            "structured": r.structuredContent,
            "is_error": r.isError,
            "text": e.content[0].text,
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
