"""OpenEnv's ``/ws`` frames and HTTP endpoints on the HTTP side of ``openenv.Server``."""

from __future__ import annotations

import asyncio
import base64
import os

import httpx
import pytest
from bridge_envs import BenchCounter, RandomWalk
from bridge_kit import WAIT_S, Ws, served, wait_until, ws_url

import openenv
from echo_env import EchoEnvironment
from openenv.http import HttpOptions

pytestmark = [pytest.mark.anyio, pytest.mark.timing]


class Slow(openenv.Environment):
    """Sleeps ``action["sleep"]`` seconds per step (on the loop)."""

    max_sessions = 4

    def reset(self, **kw: object) -> dict[str, int]:
        return {"n": 0}

    async def step(self, action: dict[str, float]) -> dict[str, float]:
        await asyncio.sleep(float(action.get("sleep", 0)))
        return {"slept": action.get("sleep", 0)}


async def test_session_frames_and_metadata() -> None:
    async with served(RandomWalk) as srv, Ws(ws_url(srv.http_url)) as ws:
        r = await ws.ask({"type": "reset", "data": {"seed": 7, "episode_id": "e1", "level": 2}})
        assert r["type"] == "observation"
        d = r["data"]
        # OpenEnv 0.10 shape: metadata inside the body and as a sibling; extra keys are additive
        assert d["observation"] == {"pos": 0, "seed": 7, "opts": {"level": 2}, "metadata": {"start": True}}
        assert d["metadata"] == {"start": True} and d["reward"] is None and d["done"] is False
        assert d["episode_id"] == "e1" and d["step_count"] == 0
        steps = 0
        while steps < 12:
            d = (await ws.ask({"type": "step", "data": {"move": 1}}))["data"]
            steps += 1
            assert d["metadata"]["tags"] == ["a", "b"], "metadata is preserved (OpenEnv drops it)"
            assert isinstance(d["reward"], float), f"rewards are numbers (bool -> float), got {d['reward']!r}"
            assert d["done"] == (d["terminated"] or d["truncated"])
            if d["done"]:
                break
        assert d["done"], "the walk ends by termination or by truncation at 12 steps"
        assert steps == d["step_count"]
        st = (await ws.ask({"type": "state"}))["data"]
        assert st["episode_id"] == "e1" and st["step_count"] == steps and "pos" in st
        assert st["status"] in ("TERMINATED", "TRUNCATED")
        err = await ws.ask({"type": "step", "data": {"move": 1}})
        assert err["type"] == "error" and err["data"]["code"] == "EXECUTION_ERROR"
        assert err["data"]["status"] == "FAILED_PRECONDITION"


async def test_error_frames_keep_the_connection() -> None:
    async with served(RandomWalk) as srv, Ws(ws_url(srv.http_url)) as ws:
        await ws.ask({"type": "reset", "data": {"seed": 1}})
        bad = await ws.ask("not json{")
        assert bad["type"] == "error" and bad["data"]["code"] == "INVALID_JSON"
        bad = await ws.ask({"type": "nope"})
        assert bad["data"]["code"] == "UNKNOWN_TYPE" and bad["data"]["message"] == "Unknown message type: nope"
        bad = await ws.ask({"type": "state", "extra": 1})
        assert bad["data"]["code"] == "VALIDATION_ERROR" and bad["data"]["errors"][0]["type"] == "extra_forbidden"
        bad = await ws.ask({"type": "step"})
        assert bad["data"]["code"] == "VALIDATION_ERROR" and bad["data"]["errors"][0]["loc"] == ["data"]
        bad = await ws.ask({"type": "reset", "data": {"seed": -1}})
        assert bad["data"]["code"] == "VALIDATION_ERROR"
        bad = await ws.ask({"type": "step", "data": {"move": 9}})  # openenv.InvalidAction
        assert bad["data"]["code"] == "VALIDATION_ERROR" and "larger than 3" in bad["data"]["message"]
        ok = await ws.ask({"type": "step", "data": {"move": 1}})
        assert ok["type"] == "observation" and ok["data"]["step_count"] == 1, "errors changed nothing"
        mcp = await ws.ask({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 7}})
        assert mcp["type"] == "mcp" and mcp["data"]["id"] == 7 and mcp["data"]["error"]["code"] == -32603


async def test_close_frame_ends_the_session_without_reply() -> None:
    async with served(RandomWalk) as srv, Ws(ws_url(srv.http_url)) as ws:
        await ws.ask({"type": "reset"})
        assert srv.manager.active == 1
        await ws.send({"type": "close"})
        from websockets.exceptions import ConnectionClosed

        with pytest.raises(ConnectionClosed) as info:
            await ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1000
        await wait_until(lambda: srv.manager.active == 0, "the slot to be freed")


async def test_capacity_error_then_close_and_shared_with_grpc() -> None:
    async with served(RandomWalk, max_sessions=1) as srv:
        async with openenv.EnvClient(srv.address) as grpc_client:  # the gRPC side holds the one slot
            await grpc_client.reset(seed=1)
            async with Ws(ws_url(srv.http_url)) as ws:
                first = await ws.recv()
                assert first["type"] == "error" and first["data"]["code"] == "CAPACITY_REACHED"
                assert first["data"]["active_sessions"] == 1 and first["data"]["max_sessions"] == 1
                from websockets.exceptions import ConnectionClosed

                with pytest.raises(ConnectionClosed):
                    await ws.recv()
        await wait_until(lambda: srv.manager.active == 0, "the gRPC slot to be freed")
        async with Ws(ws_url(srv.http_url)) as ws:  # now the WebSocket gets it
            assert (await ws.ask({"type": "reset"}))["type"] == "observation"
            with pytest.raises(openenv.ResourceExhausted):
                async with openenv.EnvClient(srv.address, connect_timeout=WAIT_S) as c:
                    await c.reset()


async def test_tool_env_step_frames() -> None:
    async with served(EchoEnvironment) as srv, Ws(ws_url(srv.http_url)) as ws:
        r = await ws.ask({"type": "reset", "data": {}})
        assert r["data"]["observation"] == {"metadata": {"message": "Echo environment ready!"}}
        tools = (await ws.ask({"type": "step", "data": {"type": "list_tools"}}))["data"]["observation"]["tools"]
        assert [t["name"] for t in tools] == ["echo_message", "echo_with_length"]
        assert tools[0]["input_schema"]["required"] == ["message"]
        r = await ws.ask(
            {
                "type": "step",
                "data": {"type": "call_tool", "tool_name": "echo_with_length", "arguments": {"message": "hey"}},
            }
        )
        obs = r["data"]["observation"]
        assert obs["tool_name"] == "echo_with_length" and obs["error"] is None
        assert obs["result"]["data"] == {"message": "hey", "length": 3}
        assert isinstance(obs["result"]["data"]["length"], int)
        assert obs["result"]["content"][0]["type"] == "text" and obs["result"]["is_error"] is False
        assert r["data"]["reward"] == pytest.approx(0.3)
        r = await ws.ask({"type": "step", "data": {"type": "call_tool", "tool_name": "nope", "arguments": {}}})
        assert r["type"] == "observation", "OpenEnv answers an unknown tool with an error observation"
        assert r["data"]["observation"]["error"]["error_type"] == "tool_not_found"
        assert r["data"]["observation"]["result"] is None
        r = await ws.ask(
            {"type": "step", "data": {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": 5}}}
        )
        assert r["data"]["observation"]["error"]["error_type"] == "invalid_args"
        r = await ws.ask(
            {
                "type": "mcp",
                "data": {
                    "jsonrpc": "2.0",
                    "id": "a",
                    "method": "tools/call",
                    "params": {"name": "echo_message", "arguments": {"message": "yo"}},
                },
            }
        )
        assert r["data"]["result"]["data"] == "yo" and r["data"]["result"]["content"][0]["text"] == "yo"
        st = (await ws.ask({"type": "state"}))["data"]
        assert st["step_count"] == 1 and st["echoed"] == 2, "tools/call over mcp is a side call, not a step"


async def test_correlation_ids_and_server_timeouts() -> None:
    async with served(Slow) as srv, Ws(ws_url(srv.http_url)) as ws:
        hello = await ws.ask({"type": "openenv.hello", "id": 0})
        assert hello["id"] == 0 and hello["data"]["info_b64"]
        assert hello["data"]["session_id"]
        r = await ws.ask({"type": "reset", "id": "r1"})
        assert r["id"] == "r1" and r["data"]["observation"] == {"n": 0}, "extended replies keep the raw body"
        # the step would sleep an hour: only the server-side timeout can end it
        r = await ws.ask({"type": "step", "id": 2, "data": {"sleep": 3600}, "timeout_s": 0.05})
        assert r["id"] == 2 and r["type"] == "error" and r["data"]["status"] == "DEADLINE_EXCEEDED"
        r = await ws.ask({"type": "state", "id": 3})
        assert r["id"] == 3 and r["data"]["status"] == "ABORTED"


async def test_idle_reaper_frees_the_slot() -> None:
    async with served(RandomWalk, idle_timeout_s=0.3) as srv, Ws(ws_url(srv.http_url)) as ws:
        # The session opens with the connection. Nothing is sent: a request would have to
        # arrive within the short idle timeout, which a loaded machine does not guarantee.
        msg = await ws.recv()  # nothing asked: the server ends the idle session
        assert msg["type"] == "error" and msg["data"]["status"] == "DEADLINE_EXCEEDED"
        await wait_until(lambda: srv.manager.active == 0, "the idle session to be reaped")


async def test_half_open_socket_is_dropped_by_keepalive() -> None:
    """A client that vanishes without closing (never answers pings) loses its slot."""
    opts = HttpOptions(ws_ping_interval=0.2, ws_ping_timeout=0.2)
    async with served(RandomWalk, http_options=opts) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.http.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        status = await asyncio.wait_for(reader.readline(), WAIT_S)
        assert b" 101 " in status, status
        try:  # from now on the client reads nothing and answers no ping, but keeps the TCP connection
            # opened_total, not active == 1: the keepalive may drop the session before a poll sees it
            await wait_until(lambda: srv.manager.opened_total == 1, "the session to open")
            await wait_until(lambda: srv.manager.active == 0, "the silent client's slot to be freed")
        finally:
            writer.close()


async def test_drain_ends_websocket_sessions() -> None:
    srv = openenv.Host(RandomWalk, "127.0.0.1", 0, http_port=0)
    await srv.start()
    try:
        async with Ws(ws_url(srv.http_url)) as ws:
            await ws.ask({"type": "reset"})
            stopper = asyncio.ensure_future(srv.stop(1.0))
            msg = await ws.recv()
            assert msg["type"] == "error" and msg["data"]["code"] == "SESSION_ERROR"
            await asyncio.wait_for(stopper, WAIT_S)
    finally:
        await srv.stop(0.5)
    assert srv.manager.active == 0


async def test_http_endpoints() -> None:
    async with served(BenchCounter) as srv, httpx.AsyncClient(base_url=srv.http_url, trust_env=False) as http:
        assert (await http.get("/health")).json() == {"status": "healthy"}
        md = (await http.get("/metadata")).json()
        assert md["name"] == "counter" and isinstance(md["description"], str)
        schema = (await http.get("/schema")).json()
        assert set(schema) >= {"action", "observation", "state"}
        assert schema["action"]["properties"]["delta"]["type"] == "integer"
        api = (await http.get("/openapi.json")).json()
        assert api["info"]["version"].startswith("1.") and "/health" in api["paths"]
        info = (await http.get("/openenv/info")).json()
        assert info["name"] == "counter" and info["capabilities"]["max_sessions"] == 1024
        assert (await http.get("/nope")).status_code == 404
        rpc = await http.post("/mcp", json={})
        assert rpc.status_code == 200 and rpc.json()["jsonrpc"] == "2.0" and rpc.json()["error"]["code"] == -32600
