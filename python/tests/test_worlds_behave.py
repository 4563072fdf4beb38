"""Worlds that behave (RFC 0016, issue 51), each client in its own process (``world_peer.py``).

A wait its client gave up on no longer holds the session: the client's timeout travels with the
request and the server ends the wait (``DEADLINE_EXCEEDED``, nothing changed: a simultaneous
move withdrawn), while a client that gives up on a server that does not answer raises the
distinct ``ClientTimeout``. A player whose opponent's connection drops is told at once (a seat
event with the rejoin deadline), and the world ends by its declared rule when the deadline
passes. OpenEnv's JSON ``/ws`` refuses world arguments instead of ignoring them. Every wait of
the tests themselves is bounded only as a hang guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openenv_testenvs import AsyncSlow

import openenv
from openenv.games import RockPaperScissors, TicTacToe

pytestmark = pytest.mark.anyio

WAIT = 60.0  # a hang guard, never a speed bound
PEER = str(pathlib.Path(__file__).with_name("world_peer.py"))


class QuickForfeitTicTacToe(TicTacToe):
    """Tic-tac-toe whose empty seat is held one second, then forfeits (the leaver loses)."""

    rejoin_timeout = 1.0
    vacancy = "forfeit"


@contextlib.asynccontextmanager
async def hosted(factory: Any) -> AsyncIterator[openenv.Host]:
    """gRPC and the HTTP side (OpenEnv's /ws, the binary WebSocket) on port 0."""
    host = openenv.Host(factory, "127.0.0.1", 0, http_port=0)
    await asyncio.wait_for(host.start(), WAIT)
    try:
        yield host
    finally:
        await asyncio.wait_for(host.stop(1.0), WAIT)


class Peer:
    """A client in another process: each call is one line out, one JSON line back."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.world: dict[str, Any] = {}

    @classmethod
    async def start(cls, url: str, **kwargs: Any) -> tuple[Peer, dict[str, Any]]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, PEER, url, json.dumps(kwargs), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        peer = cls(proc)
        first = await peer.answer()
        peer.world = first.get("world", {})
        return peer, first

    def send(self, call: str, **kwargs: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"call": call, "kwargs": kwargs}) + "\n").encode())

    async def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), WAIT)
        assert line, f"the peer process ended (exit status {await self.proc.wait()})"
        out: dict[str, Any] = json.loads(line)
        return out

    async def call(self, call: str, **kwargs: Any) -> dict[str, Any]:
        self.send(call, **kwargs)
        return await self.answer()

    async def ok(self, call: str, **kwargs: Any) -> dict[str, Any]:
        out = await self.call(call, **kwargs)
        assert "ok" in out, (call, kwargs, out)
        ts: dict[str, Any] = out["ok"]
        return ts

    async def end(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(OSError):
                self.send("exit")
            try:
                await asyncio.wait_for(self.proc.wait(), WAIT)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


@contextlib.asynccontextmanager
async def world_of_two(url: str) -> AsyncIterator[tuple[Peer, Peer]]:
    """Two client processes in one world: the owner acting for the first agent, then a joiner."""
    peers: list[Peer] = []
    try:
        first, hello = await Peer.start(url, agent_ids=[_first_agent(url)])
        peers.append(first)
        assert "world" in hello, hello
        second, hello = await Peer.start(url, join_token=first.world["join_token"])
        peers.append(second)
        assert "world" in hello, hello
        yield first, second
    finally:
        for p in peers:
            await p.end()


_FIRST: dict[str, str] = {}


def _first_agent(url: str) -> str:
    return _FIRST[url]


async def test_a_wait_its_client_gave_up_on_leaves_the_session_answering() -> None:
    """Finding 1: after ``observe(wait=True, timeout=...)`` timed out, the session answered
    nothing (not even a plain observe) until the other agent moved. The timeout now travels with
    the request: the server ends the wait with its own DEADLINE_EXCEEDED and answers at once."""
    async with hosted(TicTacToe) as host:
        _FIRST[host.address] = "x"
        async with world_of_two(host.address) as (x, o):
            await x.ok("reset")
            r = await o.ok("reset")
            assert r["to_act"] == ["x"]
            timed_out = await o.call("observe", wait=True, timeout=0.5)  # x never moves
            assert timed_out.get("deadline") and not timed_out["client_timeout"], timed_out
            assert "client-side" not in timed_out["message"], timed_out  # the server's answer
            r = await o.ok("observe", timeout=20.0)  # answered at once, not after x's move
            assert r["to_act"] == ["x"] and r["agents"]["o"]["observation"]["board"] == [0] * 9
            await x.ok("step", action=4)
            r = await o.ok("observe", wait=True, timeout=WAIT)
            assert r["to_act"] == ["o"] and r["agents"]["o"]["observation"]["board"][4] == 2


async def test_a_simultaneous_move_abandoned_by_its_timeout_is_never_played() -> None:
    """Finding 1: in rock-paper-scissors a move whose client timed out stayed gathered and was
    played with the other agent's next move. Now the server withdraws it at the deadline: the
    round is played with the move sent after it."""
    async with hosted(RockPaperScissors) as host:
        _FIRST[host.address] = "player_0"
        async with world_of_two(host.address) as (p0, p1):
            await p0.ok("reset")
            await p1.ok("reset")
            gave_up = await p0.call("step", action=0, timeout=0.5)  # rock; player_1 has not thrown
            assert gave_up.get("deadline") and not gave_up["client_timeout"], gave_up
            p1.send("step", action=1)  # paper: waits for player_0's throw of this round
            r0 = await p0.ok("step", action=2, timeout=WAIT)  # scissors: the round is played now
            r1 = (await p1.answer())["ok"]
            assert r0["agents"]["player_0"]["reward"] == 1.0 and r1["agents"]["player_1"]["reward"] == -1.0
            assert r1["agents"]["player_1"]["observation"] == {"round": 1, "opponent_last": 2}


async def test_a_client_timeout_and_a_server_deadline_raise_different_errors() -> None:
    """Finding 1: both timeouts raised the same class. A server that does not answer in time
    gives the client's own ``ClientTimeout`` (a ``DeadlineExceeded`` still), the server's
    ``DEADLINE_EXCEEDED`` answer plain ``DeadlineExceeded``."""
    async with hosted(AsyncSlow) as host:
        slow, _ = await Peer.start(host.address)
        bounded, _ = await Peer.start(host.address)
        try:
            await slow.ok("reset")
            local = await slow.call("step", action={"s": 3600}, timeout=0.5)  # the server sleeps an hour
            assert local["client_timeout"] and local["deadline"] and local["error"] == "ClientTimeout", local
            await bounded.ok("reset")
            server = await bounded.call("step", action={"s": 3600}, step_timeout=0.2, timeout=WAIT)
            assert server["deadline"] and not server["client_timeout"], server
            assert server["error"] == "DeadlineExceeded", server
        finally:
            await slow.end()
            await bounded.end()


async def test_a_player_is_told_its_opponent_left_and_the_world_ends_at_the_deadline() -> None:
    """Finding 2: nothing told a player that its opponent disconnected; it waited forever. Now
    its wait answers with a seat event (the seat and the rejoin deadline), and when the deadline
    passes the declared rule (here forfeit) ends the episode, which wakes even a plain wait."""
    async with hosted(QuickForfeitTicTacToe) as host:
        _FIRST[host.address] = "x"
        async with world_of_two(host.address) as (x, o):
            await x.ok("reset")
            await o.ok("reset")
            await x.ok("step", action=4)
            await o.ok("step", action=0)  # x to act: o waits for x
            o.send("observe", wait=True, seat_events=True, timeout=WAIT)
            x.send("exit")  # x's process ends without closing: its connection drops
            told = (await o.answer())["ok"]
            (event,) = told["seat_events"]
            assert event["kind"] == "left" and event["agent_ids"] == ["x"], told
            assert 0.0 <= event["rejoin_within"] <= 1.0 and not told["done"], told
            r = await o.ok("observe", wait=True, timeout=WAIT)  # a 1.4-style wait: woken by the end
            assert r["done"] and r["terminated"], r
            assert [e["kind"] for e in r["seat_events"]] == ["expired"], r
            assert r["agents"]["o"]["reward"] == 1.0 and r["agents"]["o"]["terminated"], r


async def test_json_ws_refuses_world_arguments_instead_of_ignoring_them() -> None:
    """Finding 3: over the JSON /ws transport (an http:// URL) ``join_token`` and ``agent_ids``
    were silently dropped: the joiner was alone in a new world and a made-up token was
    accepted. The client refuses them with a clear error, and so does the server's /ws."""
    import websockets

    async with hosted(TicTacToe) as host:
        owner, hello = await Peer.start(host.address, agent_ids=["x"])
        try:
            token = owner.world["join_token"]
            for kwargs in ({"join_token": "made-up"}, {"join_token": token, "agent_ids": ["o"]}):
                peer, hello = await Peer.start(host.http_url, **kwargs)
                await peer.end()
                assert hello.get("error") == "Unimplemented" and "binary WebSocket" in hello["message"], (kwargs, hello)
            ws_url = f"ws://127.0.0.1:{host.http.port}/ws?join_token=made-up"
            async with websockets.connect(ws_url, open_timeout=WAIT) as ws:
                await ws.send(json.dumps({"type": "reset", "data": {}}))
                frame = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
            assert frame["type"] == "error" and "binary WebSocket" in json.dumps(frame), frame
        finally:
            await owner.end()
