"""``/ws`` answers in frame order, and ``?session_id=`` attaches to an HTTP-created session.

Both over a server's own HTTP side (the engine) and over ``openenv bridge`` (the relay onto a
remote gRPC server, which reads ahead: it forwards frames while earlier ones are still in the
environment). Real sockets throughout; the only look inside is at the relay's own gRPC
connection, to know that it really has several requests in flight before the gate opens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest
from bridge_kit import WAIT_S, Ws, served, wait_until, ws_url

import openenv
import openenv.bridge as bridge
import openenv.http as http_mod
from echo_env.server import EchoEnvironment

pytestmark = pytest.mark.anyio


class GatedCounter(openenv.Environment):
    """A JSON counter whose first step of every episode waits for ``gate`` (class-wide), so a
    test can send frames while that step is in the environment."""

    name = "gated-counter"
    action_type: ClassVar[Any] = {"type": "integer"}
    observation_type: ClassVar[Any] = {"type": "object"}
    run_in_thread = False
    entered: asyncio.Event
    gate: asyncio.Event

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> dict[str, Any]:
        self.total = 0
        return {"total": 0}

    async def step(self, action: int) -> openenv.StepResult:
        if self.total == 0:
            type(self).entered.set()
            await type(self).gate.wait()
        self.total += action
        return openenv.StepResult({"total": self.total}, reward=float(action))

    def state(self) -> dict[str, Any]:
        return {"total": self.total}


@contextlib.asynccontextmanager
async def http_side(factory: Any, via: str) -> AsyncIterator[tuple[str, Any]]:
    """(HTTP URL, what holds the sessions): the server's own HTTP side (``via="server"``: its
    ``SessionManager``), or ``openenv bridge`` in front of its gRPC side (``"bridge"``: the
    bridge's ``RemoteBackend``)."""
    if via == "server":
        async with served(factory) as srv:
            yield srv.http_url or "", srv.manager
        return
    srv = openenv.Server(factory, "127.0.0.1", 0)
    await srv.start()
    try:
        backend = await bridge.RemoteBackend.connect(f"grpc://127.0.0.1:{srv.port}")
        http = http_mod.HttpServer(http_mod.BridgeApp(backend), "127.0.0.1", 0)
        await http.start()
        try:
            yield http.url, backend
        finally:
            await http.stop()
            await backend.stop()
    finally:
        await srv.stop(1.0)


@pytest.mark.parametrize("via", ["server", "bridge"])
async def test_answers_follow_frame_order_when_frames_wait_behind_a_step(via: str) -> None:
    GatedCounter.entered, GatedCounter.gate = asyncio.Event(), asyncio.Event()
    async with http_side(GatedCounter, via) as (url, holder), Ws(ws_url(url)) as ws:
        assert (await ws.ask({"type": "reset"}))["type"] == "observation"
        frames: list[Any] = [
            {"type": "step", "data": 1},  # waits for the gate in the environment
            {"type": "openenv.hello"},  # answered by the translator, must not overtake the step
            {"type": "step", "data": 2},
            "{not json",
            {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 7, "method": "ping"}},
            {"type": "state"},
            {"type": "openenv.render"},  # this environment has no render hook: an error frame
            {"type": "nope"},
            {"type": "step", "data": 4},
        ]
        for f in frames:
            await ws.send(f)
        await asyncio.wait_for(GatedCounter.entered.wait(), WAIT_S)
        if via == "bridge":  # the relay read ahead: the later steps and the state are at the remote already
            (session,) = holder._open
            await wait_until(lambda: len(session._c._pending) >= 4, "the relay forwarding while step 1 waits")
        GatedCounter.gate.set()
        replies = [await ws.recv() for _ in frames]
    shapes = [(r["type"], r.get("data", {}).get("code") if r["type"] == "error" else None) for r in replies]
    assert shapes == [
        ("observation", None),
        ("openenv.hello", None),
        ("observation", None),
        ("error", "INVALID_JSON"),
        ("mcp", None),
        ("state", None),
        ("error", "UNKNOWN_TYPE"),
        ("error", "UNKNOWN_TYPE"),
        ("observation", None),
    ], replies
    assert [replies[i]["data"]["observation"]["total"] for i in (0, 2, 8)] == [1, 3, 7]
    assert replies[4]["data"] == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert replies[5]["data"]["step_count"] == 2 and replies[5]["data"]["total"] == 3
    assert replies[6]["data"]["status"] == "UNIMPLEMENTED"


def _rpc(method: str, rid: int, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def _active(holder: Any) -> int:
    return int(holder.active)


@pytest.mark.parametrize("via", ["server", "bridge"])
async def test_an_attached_websocket_shares_the_session_which_outlives_it_and_ends_with_its_owner(via: str) -> None:
    async with (
        http_side(EchoEnvironment, via) as (url, holder),
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=WAIT_S) as http,
    ):
        sid = (await http.post("/mcp", json=_rpc("openenv/session/create", 1))).json()["result"]["session_id"]
        assert _active(holder) == 1
        call = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "a"}}
        async with Ws(ws_url(url, f"session_id={sid}")) as first:
            hello = await first.ask({"type": "openenv.hello"})
            assert hello["data"]["session_id"] == sid, "the connection drives the HTTP-created session"
            await first.ask({"type": "reset"})
            assert (await first.ask({"type": "step", "data": call}))["data"]["observation"]["result"]["data"] == "a"
            async with Ws(ws_url(url, f"session_id={sid}")) as second:  # one attached WebSocket at a time
                refused = await second.recv()
                assert refused["data"]["status"] == "FAILED_PRECONDITION", refused
                assert "already has an attached WebSocket" in refused["data"]["message"]
        # The attaching connection is gone; the session is not (its owner is the HTTP side).
        assert _active(holder) == 1
        rpc = _rpc("tools/call", 2, name="echo_message", arguments={"message": "b"}, session_id=sid)
        assert (await http.post("/mcp", json=rpc)).json()["result"]["data"] == "b"
        async with Ws(ws_url(url, f"session_id={sid}")) as again:
            state = (await again.ask({"type": "state"}))["data"]
            assert state["step_count"] == 1, "the step of the first connection is the session's"
            # Closing it from its owner while a WebSocket is attached: it ends when that detaches.
            closing = (await http.post("/mcp", json=_rpc("openenv/session/close", 3, session_id=sid))).json()
            assert closing["result"] == {"session_id": sid, "closed": False, "closing": True}
            assert (await again.ask({"type": "state"}))["data"]["step_count"] == 1
        await wait_until(lambda: _active(holder) == 0, "the session closed once its WebSocket detached")
        rpc = _rpc("tools/call", 4, name="echo_message", arguments={"message": "c"}, session_id=sid)
        assert (await http.post("/mcp", json=rpc)).json()["error"]["data"]["status"] == "INVALID_ARGUMENT"
        async with Ws(ws_url(url, f"session_id={sid}")) as late:
            gone = await late.recv()
            assert gone["type"] == "error" and "Unknown session_id" in gone["data"]["message"]


@pytest.mark.parametrize("via", ["server", "bridge"])
async def test_jsonrpc_tool_requests_keep_their_answers_and_free_their_sessions(via: str) -> None:
    """``tools/*`` on ``POST /mcp`` go through the served engine (or the bridge's relay) as
    protocol requests: the answers, error codes included, are the JSON-RPC ones, and the
    temporary session of each request is closed once it is answered."""
    async with (
        http_side(EchoEnvironment, via) as (url, holder),
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=WAIT_S) as http,
    ):
        listed = (await http.post("/mcp", json=_rpc("tools/list", 1))).json()
        assert sorted(t["name"] for t in listed["result"]["tools"]) == ["echo_message", "echo_with_length"]
        called = (
            await http.post("/mcp", json=_rpc("tools/call", 2, name="echo_with_length", arguments={"message": "ab"}))
        ).json()
        assert called["result"]["data"] == {"message": "ab", "length": 2} and called["result"]["isError"] is False
        missing = (await http.post("/mcp", json=_rpc("tools/call", 3, name="nope"))).json()
        assert missing["error"]["code"] == -32602 and missing["error"]["data"]["status"] == "NOT_FOUND", missing
        bad = (await http.post("/mcp", json=_rpc("tools/call", 4, name="echo_message", arguments={"nope": 1}))).json()
        assert bad["error"]["code"] == -32602 and bad["error"]["data"]["status"] == "INVALID_ARGUMENT", bad
        refused = (
            await http.post("/mcp", json=_rpc("openenv/session/create", 7, options=["not", "an", "object"]))
        ).json()
        assert refused["error"]["code"] == -32602 and "must be an object" in refused["error"]["message"], refused
        await wait_until(lambda: _active(holder) == 0, "every temporary session closed")
        # The /mcp WebSocket: one session for the connection, the same answers.
        async with Ws(url.replace("http://", "ws://") + "/mcp") as ws:
            r = await ws.ask(_rpc("tools/call", 5, name="echo_message", arguments={"message": "w"}))
            assert r["result"]["data"] == "w"
            r = await ws.ask(_rpc("tools/call", 6, name="nope"))
            assert r["error"]["code"] == -32602 and r["error"]["data"]["status"] == "NOT_FOUND"
            assert _active(holder) == 1
        await wait_until(lambda: _active(holder) == 0, "the /mcp WebSocket's session closed with it")


async def test_sessions_of_mcp_count_against_the_client_that_opened_them() -> None:
    """The engine counts sessions per client (the request's address reaches the handshake of
    the session it opens): beyond the limit, /mcp answers the capacity error."""
    async with (
        served(EchoEnvironment, max_sessions_per_client=1) as srv,
        httpx.AsyncClient(base_url=srv.http_url, trust_env=False, timeout=WAIT_S) as http,
    ):
        sid = (await http.post("/mcp", json=_rpc("openenv/session/create", 1))).json()["result"]["session_id"]
        again = (await http.post("/mcp", json=_rpc("openenv/session/create", 2))).json()
        assert again["error"]["code"] == -32000 and "per client" in again["error"]["message"], again
        side = (await http.post("/mcp", json=_rpc("tools/list", 3))).json()
        assert side["error"]["data"]["status"] == "RESOURCE_EXHAUSTED", side
        owned = (await http.post("/mcp", json=_rpc("tools/list", 4, session_id=sid))).json()
        assert len(owned["result"]["tools"]) == 2, "the client's own session still answers"
        await http.post("/mcp", json=_rpc("openenv/session/close", 5, session_id=sid))
        assert "result" in (await http.post("/mcp", json=_rpc("tools/list", 6))).json()


async def test_an_idle_registry_session_ends_its_attached_websocket_and_is_forgotten() -> None:
    async with (
        served(EchoEnvironment, idle_timeout_s=0.4) as srv,
        httpx.AsyncClient(base_url=srv.http_url, trust_env=False, timeout=WAIT_S) as http,
    ):
        sid = (await http.post("/mcp", json=_rpc("openenv/session/create", 1))).json()["result"]["session_id"]
        async with Ws(ws_url(srv.http_url, f"session_id={sid}")) as ws:
            assert (await ws.ask({"type": "reset"}))["type"] == "observation"
            ended = await ws.recv()  # nothing more is sent: the reaper ends the session
            assert ended["type"] == "error" and ended["data"]["status"] == "DEADLINE_EXCEEDED", ended
        await wait_until(lambda: srv.manager.active == 0, "the idle session's slot freed")
        gone = (await http.post("/mcp", json=_rpc("tools/list", 2, session_id=sid))).json()
        assert (
            gone["error"]["data"]["status"] == "INVALID_ARGUMENT" and "Unknown session_id" in gone["error"]["message"]
        )
        # An idle registry session with nothing attached is forgotten too.
        sid = (await http.post("/mcp", json=_rpc("openenv/session/create", 3))).json()["result"]["session_id"]
        await wait_until(lambda: srv.manager.active == 0, "the idle session's slot freed")
        gone = (await http.post("/mcp", json=_rpc("tools/list", 4, session_id=sid))).json()
        assert "Unknown session_id" in gone["error"]["message"], gone
