"""Resume and join tokens across workers (RFC 0013, Tokens across workers), step by step.

Two workers of one server, in this process, each on ports of its own (so which worker a
connection reaches is the test's choice, not the kernel's) and sharing a private run
directory as ``--workers 2`` siblings do: a handshake with one worker's token on the other's
listener (gRPC on grpc.aio or grpclib, the HTTP listener's binary WebSocket, the picows
listener) is relayed to the worker that holds the session or world, and behaves there as on
a direct stream: answers, the journal, pipelining, half-close, errors in band, statuses and
close codes, takeover. A sibling that is gone, or does not answer, leaves the answer of an
unknown token.
test_workers.py runs the same over real ``openenv serve --workers 2`` processes. Cheap: a few
seconds in all (two in-process hosts per test, no interpreter starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openenv_testenvs import Counter
from worker_raw import WAIT, Raw, close, hello, reset, step

import openenv
import openenv.workers
from openenv.games import TicTacToe
from openenv.security import TokenSet
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import error_pb2
from openenv.workers import new_run_dir, remove_run_dir, token_worker

pytestmark = pytest.mark.anyio

TRANSPORTS = ["grpc", "http", "picows"]
TOKEN = "worker-relay-token"


@contextlib.asynccontextmanager
async def two_workers(factory: Any = Counter, **kwargs: Any) -> AsyncIterator[list[openenv.Host]]:
    """Workers 0 and 1 of one server: every listener each, on ports of their own."""
    run_dir = new_run_dir()
    hosts = [openenv.Host(factory, "127.0.0.1", 0, http_port=0, binary_port=0, **kwargs) for _ in range(2)]
    try:
        for i, h in enumerate(hosts):
            h._worker = (run_dir, i, 2, 0)
            await asyncio.wait_for(h.start(), WAIT)
        yield hosts
    finally:
        for h in hosts:
            await asyncio.wait_for(h.stop(0.5), WAIT)
        remove_run_dir(run_dir)


def url(h: openenv.Host, transport: str) -> str:
    if transport in ("grpc", "grpclib"):
        assert h.address
        return h.address
    if transport == "http":
        return f"ws://127.0.0.1:{h.http.port}/v1/session"
    assert h.binary_url
    return h.binary_url


def relayed(h: openenv.Host) -> int:
    assert h._peers is not None
    return h._peers.relayed_total


async def parked_on(w: openenv.Host, transport: str) -> tuple[str, str]:
    """A resumable session of ``w`` that stepped once (total 5) and whose connection dropped:
    (its resume token, its session id)."""
    first = await Raw.open(url(w, transport))
    shake = await first.ask(hello(resumable=True))
    await first.ask(reset(2))
    assert (await first.ask(step(3, 5))).step.time_step.observation.json.struct_value.fields["total"].number_value == 5
    await first.drop()
    return shake.handshake.resume_token, shake.handshake.session_id


def total(resp: pb.SessionResponse | None) -> float:
    assert resp is not None and resp.WhichOneof("kind") == "step", resp
    return float(resp.step.time_step.observation.json.struct_value.fields["total"].number_value)


def test_tokens_name_their_worker() -> None:
    assert token_worker("w1.abc") == 1 and token_worker("w12.x-y_z") == 12
    for token in ("", "abc", "w.abc", "wx.abc", "w1abc", "x1.abc", "w\uff11.abc", "w1234567.abc"):
        assert token_worker(token) is None, token


@pytest.mark.parametrize("transport", [*TRANSPORTS, "grpclib"])
async def test_a_resume_on_a_sibling_is_served_by_the_worker_that_holds_the_session(transport: str) -> None:
    async with two_workers(**({"grpc_library": "grpclib"} if transport == "grpclib" else {})) as (w0, w1):
        token, session_id = await parked_on(w1, transport)
        assert token.startswith("w1.")
        second = await Raw.open(url(w0, transport))
        again = await second.ask(hello(resumable=True, resume_token=token))
        assert again.handshake.resumed and again.handshake.session_id == session_id
        assert again.handshake.resume_token == token and again.handshake.info.name
        assert (relayed(w0), relayed(w1)) == (1, 0)
        assert total(await second.ask(step(3, 5))) == 5  # a re-sent request is answered from the journal
        piped = pb.SessionRequest(request_id=100)
        piped.pipelined.requests.extend(step(4 + i, 1) for i in range(3))
        await second.send(piped)  # several requests in one message: one answer each (RFC 0009)
        for rid in range(5, 15):  # and requests sent without waiting for their answers
            await second.send(step(rid + 2, 1))
        flat: list[pb.SessionResponse] = []
        while len(flat) < 13:
            got = await second.recv()
            assert got is not None
            flat.extend(got.pipelined.responses or [got])
        assert [total(a) for a in flat] == list(range(6, 19))
        assert [a.request_id for a in flat] == [4, 5, 6, *range(7, 17)]
        bad = await second.ask(b"\x08\x63\xff\xff")  # undecodable: answered in band, the session goes on
        assert bad.request_id == 99 and bad.error.code == error_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert not bad.error.fatal
        assert total(await second.ask(step(20, 1))) == 19
        assert (await second.ask(close(21))).WhichOneof("kind") == "close"
        assert await second.recv() is None
        assert await second.ended() == (0, "")
        await asyncio.wait_for(_until(lambda: not w1.manager.sessions), WAIT)  # closed where it lived
        assert not w0.manager.sessions


@pytest.mark.parametrize("transport", ["grpc", "picows"])
async def test_a_relayed_stream_half_closed_parks_its_session_and_ends_cleanly(transport: str) -> None:
    async with two_workers() as (w0, w1):
        token, _ = await parked_on(w1, transport)
        second = await Raw.open(url(w0, transport))
        assert (await second.ask(hello(resume_token=token))).handshake.resumed
        await second.send(step(4, 1))
        await second.half_close()  # the client sends nothing more but reads on
        assert total(await second.recv()) == 6
        assert await second.recv() is None and await second.ended() == (0, "")
        third = await Raw.open(url(w1, transport))  # parked, not closed: resumed where it lives
        assert (await third.ask(hello(resume_token=token))).handshake.resumed
        assert total(await third.ask(step(5, 1))) == 7
        await third.ask(close(6))
        await third.aclose()


async def test_a_relayed_call_past_its_deadline_ends_so_and_its_session_waits_for_its_client() -> None:
    async with two_workers() as (w0, w1):
        token, _ = await parked_on(w1, "grpc")
        late = await Raw.open(url(w0, "grpc"), deadline_s=2.0)
        await late.send(hello(resume_token=token))
        while (got := await late.recv()) is not None:  # (on a slow machine the deadline may come first)
            assert got.handshake.resumed
        assert (await late.ended())[0] == error_pb2.ERROR_CODE_DEADLINE_EXCEEDED
        again = await Raw.open(url(w0, "grpc"))  # the client went away: the session was parked
        assert (await again.ask(hello(resume_token=token))).handshake.resumed
        assert total(await again.ask(step(4, 1))) == 6
        await again.ask(close(5))
        await again.aclose()
        await late.aclose()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_relayed_stream_ends_with_the_status_a_direct_one_ends_with(transport: str) -> None:
    async with two_workers() as (w0, w1):
        token, _ = await parked_on(w1, transport)
        relayed_stream = await Raw.open(url(w0, transport))
        assert (await relayed_stream.ask(hello(resume_token=token))).handshake.resumed
        # Resumed again, directly: the relayed stream is taken over, as a direct one would be.
        direct = await Raw.open(url(w1, transport))
        assert (await direct.ask(hello(resume_token=token))).handshake.resumed
        assert await relayed_stream.recv() is None
        code, message = await relayed_stream.ended()
        assert code == error_pb2.ERROR_CODE_ABORTED and "resumed on another stream" in message
        # ... and back: the direct one ends the same way.
        back = await Raw.open(url(w0, transport))
        assert (await back.ask(hello(resume_token=token))).handshake.resumed
        assert await direct.recv() is None
        assert await direct.ended() == (code, message)
        # A server that ends its sessions (a drain) ends a relayed one as a direct one.
        other = await Raw.open(url(w1, transport))
        await other.ask(hello())
        await asyncio.wait_for(w1.stop(0.0), WAIT)
        assert await back.recv() is None and await other.recv() is None
        ended = await back.ended()
        assert ended[0] == error_pb2.ERROR_CODE_UNAVAILABLE and ended == await other.ended()


async def test_the_forwarder_checks_the_bearer_token() -> None:
    async with two_workers(tokens=TokenSet([TOKEN])) as (w0, w1):
        first = await Raw.open(url(w1, "grpc"), TOKEN)
        token = (await first.ask(hello(resumable=True))).handshake.resume_token
        await first.drop()
        refused = await Raw.open(url(w0, "grpc"))
        await refused.send(hello(resume_token=token))
        assert await refused.recv() is None
        assert (await refused.ended())[0] == error_pb2.ERROR_CODE_UNAUTHENTICATED
        assert relayed(w0) == 0
        taken = await Raw.open(url(w0, "grpc"), TOKEN)
        assert (await taken.ask(hello(resume_token=token))).handshake.resumed
        await taken.ask(close(2))
        await taken.aclose()


@pytest.mark.parametrize("transport", ["grpc", "http"])
async def test_a_gone_or_silent_sibling_leaves_the_answer_of_an_unknown_token(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with two_workers() as (w0, w1):
        token, _ = await parked_on(w1, transport)
        unknown = await Raw.open(url(w0, transport))
        expected = await unknown.ask(hello(resume_token="w0.no-such-session"))
        assert expected.error.code == error_pb2.ERROR_CODE_ABORTED and expected.error.fatal
        await asyncio.wait_for(w1.stop(0.0), WAIT)  # its sessions are lost, its socket is gone
        late = await Raw.open(url(w0, transport))
        assert await late.ask(hello(resume_token=token)) == expected
        assert relayed(w0) == 0
        # A sibling that takes the connection and never answers (stopped, hung): the hang guard.
        assert w0._peers is not None
        path = w0._peers.path(1)
        silent = await asyncio.start_unix_server(lambda r, w: asyncio.sleep(3600), path=path)
        monkeypatch.setattr(openenv.workers, "PEER_TIMEOUT_S", 0.2)
        try:
            hung = await Raw.open(url(w0, transport))
            assert await hung.ask(hello(resume_token=token)) == expected
        finally:
            silent.close()
            os.unlink(path)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_join_on_a_sibling_sits_in_the_world_of_the_worker_that_holds_it(transport: str) -> None:
    async with two_workers(TicTacToe) as (w0, w1):
        async with openenv.EnvClient(url(w1, transport), agent_ids=["x"]) as x:
            token = x.world.join_token
            assert token.startswith("w1.")
            async with openenv.EnvClient(url(w0, transport), join_token=token) as o:
                assert list(o.world.agent_ids) == ["o"] and o.world.world_id == x.world.world_id
                assert relayed(w0) == 1
                await x.reset()
                await x.step(4)
                r = await o.observe(wait=True)
                assert r.step_count == 1 and r.to_act == ["o"] and r.agents["o"].observation["board"][4] == 2
                r = await o.step(0)
                assert r.step_count == 2
                assert (await x.observe()).agents["x"].observation["board"][0] == 2
        await asyncio.wait_for(w1.stop(0.0), WAIT)
        with pytest.raises(openenv.NotFound, match="join token"):  # the world is lost with its worker
            await openenv.EnvClient(url(w0, transport), join_token=token).connect()


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.02)
