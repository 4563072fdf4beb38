"""HTTP session ids across workers (RFC 0013, Tokens across workers), step by step.

Two workers of one server in this process, each on ports of its own (so which worker a
request reaches is the test's choice) and sharing a private run directory as ``--workers 2``
siblings do: a request or WebSocket naming one worker's session on the other's HTTP listener
(``/ws?session_id=``, ``POST /mcp`` with ``params.session_id``, MCP Streamable HTTP's
``Mcp-Session-Id``) is relayed to the worker holding it and answered from there. The bearer
token is checked once, the client's address goes along, and a sibling that is gone or silent
leaves the answer of an unknown id. test_workers.py runs the same over real ``openenv serve
--workers 2`` processes. Cheap: a few seconds in all (in-process hosts, no interpreter starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import marshal
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgpack
import pytest
from openenv_worker_envs import WhoServes
from websockets.exceptions import ConnectionClosed
from worker_raw import WAIT

import openenv
import openenv.workers
from openenv.security import TokenSet
from openenv.workers import new_run_dir, remove_run_dir, token_worker

pytestmark = pytest.mark.anyio

TOKEN = "worker-http-token"
MCP = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


@contextlib.asynccontextmanager
async def two_workers(**kwargs: Any) -> AsyncIterator[list[openenv.Host]]:
    """Workers 0 and 1 of one server, HTTP on ports of their own."""
    run_dir = new_run_dir()
    hosts = [openenv.Host(WhoServes, "127.0.0.1", 0, http_port=0, **kwargs) for _ in range(2)]
    try:
        for i, h in enumerate(hosts):
            h._worker = (run_dir, i, 2, 0)
            await asyncio.wait_for(h.start(), WAIT)
        yield hosts
    finally:
        for h in hosts:
            await asyncio.wait_for(h.stop(0.5), WAIT)
        remove_run_dir(run_dir)


def base(h: openenv.Host) -> str:
    assert h.http is not None
    return f"http://127.0.0.1:{h.http.port}"


def rpc(method: str, rid: int = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def post(h: openenv.Host, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base(h), trust_env=False, timeout=WAIT) as http:
        return await http.post("/mcp", json=body, headers=headers or {})


async def create(h: openenv.Host, headers: dict[str, str] | None = None) -> str:
    sid: str = (await post(h, rpc("openenv/session/create"), headers)).json()["result"]["session_id"]
    return sid


def steps(answer: dict[str, Any]) -> int:
    """The steps a ``who`` tool call's JSON-RPC answer reports."""
    assert "result" in answer and not answer["result"].get("isError"), answer
    return int(answer["result"]["content"][0]["text"].split()[1])


def relayed(h: openenv.Host) -> int:
    assert h._peers is not None
    return h._peers.relayed_http_total


class Ws:
    def __init__(self, h: openenv.Host, sid: str, headers: dict[str, str] | None = None) -> None:
        self.url = base(h).replace("http://", "ws://") + f"/ws?session_id={sid}"
        self.headers = headers or {}

    async def __aenter__(self) -> Ws:
        from websockets.asyncio.client import connect

        self.ws = await asyncio.wait_for(connect(self.url, additional_headers=self.headers), WAIT)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.ws.close()

    async def ask(self, frame: dict[str, Any]) -> dict[str, Any]:
        await self.ws.send(json.dumps(frame))
        out: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), WAIT))
        return out


async def test_session_ids_name_their_worker_and_a_server_of_one_keeps_its_own() -> None:
    async with openenv.Host(WhoServes, "127.0.0.1", 0, http_port=0) as one:
        sid = await create(one)
        assert token_worker(sid) is None and len(sid) == 32 and int(sid, 16) >= 0
        r = await post(one, rpc("initialize", protocolVersion="2025-06-18", capabilities={}), MCP)
        assert len(r.headers["mcp-session-id"]) == 32
    async with two_workers() as (w0, w1):
        assert token_worker(await create(w1)) == 1 and token_worker(await create(w0)) == 0
        r = await post(w1, rpc("initialize", protocolVersion="2025-06-18", capabilities={}), MCP)
        assert token_worker(r.headers["mcp-session-id"]) == 1


async def test_a_sibling_s_session_is_driven_where_it_lives() -> None:
    async with two_workers() as (w0, w1):
        sid, own = await create(w1), await create(w0)
        async with Ws(w0, sid) as ws:  # attached at worker 1, through worker 0
            hello = await ws.ask({"type": "openenv.hello"})
            assert hello["data"]["session_id"] == sid
            await ws.ask({"type": "reset"})
            assert (await ws.ask({"type": "step", "data": {"delta": 2}}))["data"]["observation"]["steps"] == 2
            async with Ws(w0, sid) as second:  # one attached WebSocket at a time, wherever it comes from
                refused = json.loads(await asyncio.wait_for(second.ws.recv(), WAIT))
                assert "already has an attached WebSocket" in refused["data"]["message"], refused
        assert relayed(w0) == 2 and relayed(w1) == 0
        who = rpc("tools/call", 2, name="who", arguments={}, session_id=sid)
        assert steps((await post(w0, who)).json()) == 2
        listed = (await post(w0, rpc("tools/list", 3, session_id=sid))).json()
        assert [t["name"] for t in listed["result"]["tools"]] == ["who"]
        # A batch naming sessions of both workers: each request answered where its session is.
        batch = [who, rpc("tools/call", 4, name="who", arguments={}, session_id=own)]
        assert [steps(a) for a in (await post(w0, batch)).json()] == [2, 0]
        closed = (await post(w0, rpc("openenv/session/close", 5, session_id=sid))).json()
        assert closed["result"] == {"session_id": sid, "closed": True}
        assert w1.manager.active == 0 and w0.manager.active == 1
        gone = (await post(w0, who)).json()  # relayed, and unknown there now
        assert "Unknown session_id" in gone["error"]["message"], gone


async def test_an_mcp_session_is_served_by_the_worker_that_issued_its_id() -> None:
    async with two_workers() as (w0, w1):
        r = await post(w1, rpc("initialize", protocolVersion="2025-06-18", capabilities={}), MCP)
        sid = r.headers["mcp-session-id"]
        h = {**MCP, "Mcp-Session-Id": sid}
        assert (await post(w0, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h)).status_code == 202
        call = await post(w0, rpc("tools/call", 2, name="who", arguments={}), h)
        assert call.status_code == 200 and call.headers["mcp-session-id"] == sid, call.headers
        assert "result" in call.text and w1.manager.active == 1 and w0.manager.active == 0
        assert w1.manager.per_client["127.0.0.1"] == 1  # the client's address went along
        async with httpx.AsyncClient(base_url=base(w0), trust_env=False, timeout=WAIT) as http:
            assert (await http.delete("/mcp", headers=h)).status_code == 200
        assert (await post(w0, rpc("tools/call", 3, name="who", arguments={}), h)).status_code == 404
        assert w1.manager.active == 0 and relayed(w0) == 4


async def test_the_bearer_token_is_checked_by_the_worker_reached() -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with two_workers(tokens=TokenSet([TOKEN])) as (w0, w1):
        sid = await create(w1, auth)
        who = rpc("tools/call", 2, name="who", arguments={}, session_id=sid)
        assert (await post(w0, who)).status_code == 401
        assert relayed(w0) == 0
        assert steps((await post(w0, who, auth)).json()) == 0
        async with Ws(w0, sid, auth) as ws:
            assert (await ws.ask({"type": "openenv.hello"}))["data"]["session_id"] == sid


async def test_a_gone_or_silent_sibling_leaves_the_answer_of_an_unknown_id(monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_workers() as (w0, w1):
        sid = await create(w1)
        r = await post(w1, rpc("initialize", protocolVersion="2025-06-18", capabilities={}), MCP)
        mcp_sid = r.headers["mcp-session-id"]
        who = rpc("tools/call", 2, name="who", arguments={}, session_id=sid)
        await asyncio.wait_for(w1.stop(0.0), WAIT)  # its sessions are lost, its socket is gone

        async def unknown() -> None:
            gone = (await post(w0, who)).json()
            assert gone["error"]["message"] == f"Unknown session_id: {sid}", gone
            async with Ws(w0, sid) as ws:
                refused = json.loads(await asyncio.wait_for(ws.ws.recv(), WAIT))
                assert refused["type"] == "error" and "Unknown session_id" in refused["data"]["message"], refused
            r = await post(w0, rpc("tools/call", 3, name="who", arguments={}), {**MCP, "Mcp-Session-Id": mcp_sid})
            assert r.status_code == 404

        await unknown()
        assert relayed(w0) == 0
        # A sibling that takes the connection and never answers (stopped, hung): the hang guard.
        assert w0._peers is not None
        path = w0._peers.path(1)
        silent = await asyncio.start_unix_server(lambda r, w: asyncio.sleep(3600), path=path)
        monkeypatch.setattr(openenv.workers, "PEER_TIMEOUT_S", 0.2)
        try:
            await unknown()
        finally:
            silent.close()
            os.unlink(path)
        assert relayed(w0) == 0


async def test_a_sibling_that_dies_after_taking_a_request_ends_it() -> None:
    """The sibling takes the request (its one byte) and its socket closes: a 502 for a request
    whose response had not started, a WebSocket it accepted closed with 1011, the answer of an
    unknown id for a JSON-RPC request (relayed alone: its answer is then this worker's)."""
    async with two_workers() as (w0, w1):
        sid = await create(w1)
        await asyncio.wait_for(w1.stop(0.0), WAIT)
        assert w0._peers is not None
        path = w0._peers.path(1)

        async def dies(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()  # "asgi"
            head = await reader.readexactly(5)  # the scope's frame: a kind byte, a length
            scope = msgpack.unpackb(await reader.readexactly(int.from_bytes(head[1:], "big")))
            writer.write(b"T")
            if scope["type"] == "websocket":  # accepted, then gone
                accept = msgpack.packb({"type": "websocket.accept"})
                writer.write(b"M" + len(accept).to_bytes(4, "big") + accept)
            await writer.drain()
            writer.transport.abort()

        dying = await asyncio.start_unix_server(dies, path=path)
        try:
            r = await post(w0, rpc("tools/call", 3, name="who", arguments={}), {**MCP, "Mcp-Session-Id": "w1.abc"})
            assert r.status_code == 502 and "worker 1" in r.json()["detail"], r.text
            gone = (await post(w0, rpc("tools/call", 2, name="who", arguments={}, session_id=sid))).json()
            assert gone["error"]["message"] == f"Unknown session_id: {sid}", gone
            async with Ws(w0, sid) as ws:  # accepted by the sibling, which then died
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.ask({"type": "reset"})
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011, closed.value
            assert "worker 1" in closed.value.rcvd.reason
        finally:
            dying.close()
            os.unlink(path)
        assert relayed(w0) == 3


async def test_a_sibling_answer_that_is_not_messagepack_ends_the_request_as_a_dead_siblings() -> None:
    """Issue 50: the workers' private socket carried ASGI messages in marshal, whose reader
    builds code objects and is not meant for untrusted bytes (bad input raised out of the
    relay: a 500). Its frames are MessagePack now, and a frame that is not a map of it ends
    the request as a sibling that died does (502), never loaded as anything else."""
    async with two_workers() as (w0, w1):
        await asyncio.wait_for(w1.stop(0.0), WAIT)
        assert w0._peers is not None
        path = w0._peers.path(1)
        code = marshal.dumps(compile("print('pwned')", "<sibling>", "exec"))

        async def garbles(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()  # "asgi"
            head = await reader.readexactly(5)
            await reader.readexactly(int.from_bytes(head[1:], "big"))
            writer.write(b"T" + b"M" + len(code).to_bytes(4, "big") + code)
            await writer.drain()
            await asyncio.sleep(WAIT)

        garbling = await asyncio.start_unix_server(garbles, path=path)
        try:
            r = await post(w0, rpc("tools/call", 3, name="who", arguments={}), {**MCP, "Mcp-Session-Id": "w1.abc"})
            assert r.status_code == 502 and "worker 1" in r.json()["detail"], r.text
        finally:
            garbling.close()
            os.unlink(path)
