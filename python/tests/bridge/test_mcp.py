"""``/mcp``: the official MCP SDK client (Streamable HTTP) and OpenEnv's JSON-RPC dialect."""

from __future__ import annotations

import httpx
import pytest
from bridge_envs import BenchCounter
from bridge_kit import WAIT_S, Ws, served

import openenv
from echo_env import EchoEnvironment

pytestmark = pytest.mark.anyio


async def test_official_mcp_client_session_lists_and_calls_tools() -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with served(EchoEnvironment) as srv:
        async with streamable_http_client(srv.http_url + "/mcp") as (read, write), ClientSession(read, write) as mcp:
            init = await mcp.initialize()
            assert init.server_info.name == "echo_env"
            tools = await mcp.list_tools()
            assert sorted(t.name for t in tools.tools) == ["echo_message", "echo_with_length"]
            echo = next(t for t in tools.tools if t.name == "echo_message")
            assert echo.input_schema["required"] == ["message"]
            r = await mcp.call_tool("echo_with_length", {"message": "hello"})
            assert not r.is_error and r.structured_content == {"message": "hello", "length": 5}
            assert r.content[0].type == "text"
            assert srv.manager.active == 1, "one environment session per MCP session"
            r = await mcp.call_tool("echo_message", {"message": "again"})
            assert r.content[0].text == "again"
            with pytest.raises(Exception, match=r"(?i)unknown tool|not found"):
                await mcp.call_tool("no_such_tool", {})
        # the client's DELETE ends the MCP session and frees the slot
        from bridge_kit import wait_until

        await wait_until(lambda: srv.manager.active == 0, "the MCP session's slot to be freed")


async def test_official_mcp_high_level_client() -> None:
    from mcp.client import Client

    async with served(EchoEnvironment) as srv:
        async with Client(srv.http_url + "/mcp") as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == {"echo_message", "echo_with_length"}
            r = await client.call_tool("echo_message", {"message": "hi"})
            assert r.content[0].text == "hi"


async def test_openenv_jsonrpc_dialect() -> None:
    async with (
        served(EchoEnvironment, max_sessions=2) as srv,
        httpx.AsyncClient(base_url=srv.http_url, trust_env=False, timeout=WAIT_S) as http,
    ):
        rpc = (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).json()
        assert rpc["id"] == 1 and rpc["result"]["tools"][0]["inputSchema"]["type"] == "object"
        rpc = (
            await http.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "echo_with_length", "arguments": {"message": "abc"}},
                },
            )
        ).json()
        assert rpc["result"]["data"] == {"message": "abc", "length": 3} and rpc["result"]["isError"] is False
        rpc = (
            await http.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope"}}
            )
        ).json()
        assert rpc["error"]["code"] == -32602 and rpc["error"]["data"]["status"] == "NOT_FOUND"
        bad = await http.post("/mcp", content=b"{oops", headers={"Content-Type": "application/json"})
        assert bad.json()["error"]["code"] == -32700
        assert (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "x/y"})).json()["error"][
            "code"
        ] == -32601
        # OpenEnv 0.10's production MCP client: an HTTP session, then a WebSocket attached to it
        sid = (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 5, "method": "openenv/session/create"})).json()[
            "result"
        ]["session_id"]
        assert srv.manager.active == 1
        call = {
            "jsonrpc": "2.0",
            "id": 6,
            "method": "tools/call",
            "params": {"name": "echo_message", "arguments": {"message": "x"}, "session_id": sid},
        }
        assert (await http.post("/mcp", json=call)).json()["result"]["data"] == "x"
        async with Ws(srv.http_url.replace("http", "ws") + f"/ws?session_id={sid}") as ws:
            st = await ws.ask({"type": "state"})
            assert st["data"]["echoed"] == 1, "the WebSocket attached to the HTTP-created session"
        closed = (
            await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 7, "method": "openenv/session/close", "params": {"session_id": sid}},
            )
        ).json()
        assert closed["result"] == {"session_id": sid, "closed": True}
        assert srv.manager.active == 0


async def test_mcp_websocket_and_env_without_tools() -> None:
    async with served(EchoEnvironment) as srv, Ws(srv.http_url.replace("http", "ws") + "/mcp") as ws:
        r = await ws.ask(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo_message", "arguments": {"message": "ws"}},
            }
        )
        assert r["result"]["data"] == "ws"
    async with (
        served(BenchCounter) as srv,
        httpx.AsyncClient(base_url=srv.http_url, trust_env=False, timeout=WAIT_S) as http,
    ):
        rpc = (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).json()
        assert rpc["error"]["code"] == -32603 and "does not support MCP" in rpc["error"]["message"]


class _Annotated(EchoEnvironment):
    """Echo, plus a tool that declares it runs code (RFC 0010) and a read-only hint."""

    @openenv.tool(annotations={"readOnlyHint": True, "openenv/sandbox": {"language": "python", "argument": "code"}})
    def run_code(self, code: str) -> str:
        """Pretend to run code."""
        return code


async def test_tool_annotations_reach_every_listener() -> None:
    """A tool's annotations, MCP's hints and this project's keys alike, reach gRPC clients,
    /ws, /mcp's JSON-RPC and the official MCP client (there the openenv/ keys are in the
    tool's _meta: the SDK's ToolAnnotations keeps only the hints MCP names)."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    want = {"readOnlyHint": True, "openenv/sandbox": {"language": "python", "argument": "code"}}
    async with served(_Annotated) as srv:
        for url in (srv.address, srv.http_url):
            async with openenv.ToolEnvClient(url) as env:
                tools = {t.name: t for t in await env.list_tools()}
                assert tools["run_code"].annotations == want, url
        async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False) as http:
            r = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
            listed = {t["name"]: t for t in r.json()["result"]["tools"]}
            assert listed["run_code"]["annotations"] == want
        async with streamable_http_client(srv.http_url + "/mcp") as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            tool = next(t for t in (await mcp.list_tools()).tools if t.name == "run_code")
            assert tool.annotations is not None and tool.annotations.read_only_hint is True
            assert tool.meta == {"openenv/sandbox": want["openenv/sandbox"]}
