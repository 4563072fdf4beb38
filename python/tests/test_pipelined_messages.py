"""Pipelined requests coalesced into one message (RFC 0009), over real loopback sockets.

The server applies the requests of a ``pipelined`` message in order and answers them in one
message, each answer in its place (errors too); bad messages are refused as a whole and lose
nothing; a request that ends the session stops the rest. The client coalesces what queues up
behind a write in flight (counted by the server, not timed), only when the server offers it,
on both gRPC engines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openenv_testenvs import AsyncCounter, Counter
from openenv_testkit import RawSession, StreamEnded, error_of, ok, target, wait_until

import openenv
from openenv.errors import ErrorCode
from openenv.grpc_libraries import server_class
from openenv.v1 import environment_pb2, payload_pb2
from openenv.values import from_value, to_value

pytestmark = pytest.mark.anyio

WAIT = 60.0  # generous: the machine is loaded; nothing here is timed
SessionRequest = environment_pb2.SessionRequest


@contextlib.asynccontextmanager
async def serving(engine: str = "grpcio", factory: Any = Counter, **kwargs: Any) -> AsyncIterator[openenv.Server]:
    srv = server_class(engine)(factory, "127.0.0.1", 0, **kwargs)
    await asyncio.wait_for(srv.start(), WAIT)
    try:
        yield srv
    finally:
        await asyncio.wait_for(srv.stop(1.0), WAIT)


def step(rid: int, delta: int) -> SessionRequest:
    action = payload_pb2.Payload(json=to_value({"delta": delta}))
    return SessionRequest(request_id=rid, step=environment_pb2.StepRequest(action=action))


def pipelined(rid: int, *items: SessionRequest) -> SessionRequest:
    msg = SessionRequest(request_id=rid)
    msg.pipelined.requests.extend(items)
    return msg


async def opened(s: RawSession) -> environment_pb2.HandshakeResponse:
    resp: environment_pb2.HandshakeResponse = await s.open()
    await s.send(SessionRequest(request_id=1, reset=environment_pb2.ResetRequest(seed=100)))
    ok(await s.recv(), "reset")
    return resp


def total(resp: environment_pb2.SessionResponse) -> int:
    value: int = from_value(ok(resp, "step").time_step.observation.json)["total"]
    return value


async def test_the_server_advertises_pipelined_requests_and_a_limit() -> None:
    async with serving() as srv, RawSession(target(srv)) as s:
        caps = (await s.open()).info.capabilities
        assert caps.pipelined_requests and caps.max_pipelined_requests == 256
    async with serving(max_pipelined_requests=0) as srv, RawSession(target(srv)) as s:
        caps = (await s.open()).info.capabilities
        assert not caps.pipelined_requests and caps.max_pipelined_requests == 0


async def test_requests_in_one_message_apply_in_order_and_each_error_answers_in_its_place() -> None:
    async with serving() as srv, RawSession(target(srv)) as s:
        await opened(s)
        msg = pipelined(
            50,
            step(10, 1),
            step(11, 5000),  # the environment refuses it: INVALID_ARGUMENT, the others go on
            SessionRequest(request_id=12, state=environment_pb2.StateRequest()),
            step(13, 2),
            SessionRequest(request_id=14),  # no kind
            SessionRequest(request_id=15, handshake=environment_pb2.HandshakeRequest(protocol_version="1.0")),
            pipelined(16, step(17, 1)),  # nested
            step(18, 3),
        )
        await s.send(msg)
        resp = await s.recv()
        assert resp.request_id == 50 and resp.WhichOneof("kind") == "pipelined"
        answers = resp.pipelined.responses
        assert [a.request_id for a in answers] == [10, 11, 12, 13, 14, 15, 16, 18]
        assert total(answers[0]) == 101
        assert error_of(answers[1]).code == ErrorCode.INVALID_ARGUMENT and not answers[1].error.fatal
        assert ok(answers[2], "state").step_count == 1  # sees the step before it, not the refused one
        assert total(answers[3]) == 103
        assert error_of(answers[4]).code == ErrorCode.INVALID_ARGUMENT
        assert error_of(answers[5]).code == ErrorCode.FAILED_PRECONDITION and not answers[5].error.fatal
        assert error_of(answers[6]).code == ErrorCode.INVALID_ARGUMENT and "nested" in answers[6].error.message
        assert total(answers[7]) == 106  # the nested message's step was not applied
        assert srv.manager.load.pipelined_messages == 1 and srv.manager.load.pipelined_requests == 8
        # the session goes on, one message per request as before
        await s.send(step(60, 1))
        assert total(await s.recv()) == 107


async def test_bad_messages_are_refused_whole_and_the_session_goes_on() -> None:
    async with serving(max_pipelined_requests=4) as srv, RawSession(target(srv)) as s:
        await opened(s)
        await s.send(pipelined(20))  # empty
        empty = await s.recv()
        assert empty.request_id == 20 and error_of(empty).code == ErrorCode.INVALID_ARGUMENT
        await s.send(pipelined(21, *(step(30 + i, 1) for i in range(5))))  # over the limit of 4
        over = await s.recv()
        assert over.request_id == 21 and error_of(over).code == ErrorCode.RESOURCE_EXHAUSTED
        assert not over.error.fatal and "at most 4" in over.error.message
        await s.send(pipelined(22, *(step(40 + i, 1) for i in range(4))))  # at the limit: nothing was lost
        answers = (await s.recv()).pipelined.responses
        assert [total(a) for a in answers] == [101, 102, 103, 104]


async def test_a_server_without_the_capability_refuses_a_pipelined_message_without_applying_it() -> None:
    async with serving(max_pipelined_requests=0) as srv, RawSession(target(srv)) as s:
        await opened(s)
        await s.send(pipelined(20, step(21, 1)))
        refused = await s.recv()
        assert refused.request_id == 20 and error_of(refused).code == ErrorCode.UNIMPLEMENTED
        assert not refused.error.fatal
        await s.send(step(22, 1))
        assert total(await s.recv()) == 101  # the refused step was not applied


async def test_a_close_inside_stops_the_rest_and_ends_the_stream_after_the_answer() -> None:
    Counter.reset_counts()
    async with serving() as srv, RawSession(target(srv)) as s:
        await opened(s)
        await s.send(
            pipelined(
                70,
                step(71, 1),
                SessionRequest(request_id=72, close=environment_pb2.CloseRequest()),
                step(73, 1),
            )
        )
        answers = (await s.recv()).pipelined.responses
        assert total(answers[0]) == 101
        assert answers[1].WhichOneof("kind") == "close"
        assert error_of(answers[2]).code == ErrorCode.FAILED_PRECONDITION and answers[2].error.fatal
        assert "not applied" in answers[2].error.message
        with pytest.raises(StreamEnded):
            await s.recv()
        await wait_until(lambda: srv.manager.active == 0 and Counter.closed == 1, WAIT, "the session released")


async def test_answers_too_big_for_one_message_come_one_per_message_in_order() -> None:
    limit = 4096
    async with serving(max_message_bytes=limit) as srv:
        # 40 step answers, each carrying a 200-character tag, do not fit 4 KiB together.
        async with RawSession(target(srv)) as t:
            hs = environment_pb2.HandshakeRequest(protocol_version="1.0")
            hs.options.update({"tag": "x" * 200})
            await t.send(SessionRequest(request_id=1, handshake=hs))
            ok(await t.recv(), "handshake")
            await t.send(SessionRequest(request_id=2, reset=environment_pb2.ResetRequest(seed=0)))
            ok(await t.recv(), "reset")
            await t.send(pipelined(3, *(step(100 + i, 1) for i in range(40))))
            answers = [await t.recv() for _ in range(40)]
            assert [a.request_id for a in answers] == [100 + i for i in range(40)]
            assert [total(a) for a in answers] == list(range(1, 41))


@pytest.mark.parametrize(
    ("server_engine", "client_engine"),
    [("grpcio", "grpcio"), ("grpclib", "grpclib"), ("grpclib", "grpcio"), ("grpcio", "grpclib")],
)
@pytest.mark.parametrize("env_cls", [Counter, AsyncCounter])
async def test_the_client_coalesces_pipelined_calls_and_keeps_them_in_order(
    server_engine: str, client_engine: str, env_cls: Any
) -> None:
    async with serving(server_engine, env_cls) as srv:
        async with openenv.EnvClient(srv.address, grpc_engine=client_engine) as env:
            await env.reset(seed=0)
            load = srv.manager.load
            for rounds in range(1, 4):
                results = await asyncio.wait_for(asyncio.gather(*(env.step({"delta": 1}) for _ in range(64))), WAIT)
                assert [r.observation["total"] for r in results] == list(range(64 * (rounds - 1) + 1, 64 * rounds + 1))
            # Calls issued together queue behind the first write and go out coalesced: counted
            # by the server, not timed. Every step went through exactly once.
            assert load.pipelined_messages >= 3 and load.pipelined_requests > load.pipelined_messages
            assert load.pipelined_requests <= 3 * 64
            assert (await env.state()).step_count == 192
            # lock-step use sends single messages (nothing queues behind a write)
            before = load.pipelined_messages
            for _ in range(5):
                await env.step({"delta": 1})
            assert load.pipelined_messages == before


async def test_errors_in_coalesced_calls_are_raised_to_their_callers_only() -> None:
    async with serving() as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=0)
        deltas = [1, 1, 5000, 1, 5000, 1] * 8
        results = await asyncio.wait_for(
            asyncio.gather(*(env.step({"delta": d}) for d in deltas), return_exceptions=True), WAIT
        )
        expected, running = [], 0
        for d in deltas:
            if d > 1000:
                expected.append("refused")
            else:
                running += d
                expected.append(running)
        got = [
            "refused" if isinstance(r, openenv.InvalidArgument) else r.observation["total"]  # type: ignore[union-attr]
            for r in results
        ]
        assert got == expected
        assert srv.manager.load.pipelined_messages >= 1


@pytest.mark.parametrize("client_engine", ["grpcio", "grpclib"])
async def test_a_client_falls_back_to_single_messages_when_the_server_does_not_offer_them(client_engine: str) -> None:
    async with serving(max_pipelined_requests=0) as srv:
        async with openenv.EnvClient(srv.address, grpc_engine=client_engine) as env:
            await env.reset(seed=0)
            results = await asyncio.wait_for(asyncio.gather(*(env.step({"delta": 1}) for _ in range(64))), WAIT)
            assert [r.observation["total"] for r in results] == list(range(1, 65))
        assert srv.manager.load.pipelined_messages == 0


async def test_the_client_respects_the_servers_limit_per_message() -> None:
    async with serving(max_pipelined_requests=3) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=0)
        results = await asyncio.wait_for(asyncio.gather(*(env.step({"delta": 1}) for _ in range(60))), WAIT)
        assert [r.observation["total"] for r in results] == list(range(1, 61))
        load = srv.manager.load
        assert load.pipelined_messages >= 1 and load.pipelined_requests <= 3 * load.pipelined_messages


async def test_a_resumable_session_applies_each_pipelined_request_once() -> None:
    async with serving() as srv, openenv.EnvClient(srv.address, resume=True) as env:
        conn = env.connection
        assert conn is not None and getattr(conn, "resume_token", "")  # answers are recorded by id
        await env.reset(seed=0)
        results = await asyncio.wait_for(asyncio.gather(*(env.step({"delta": 1}) for _ in range(32))), WAIT)
        assert [r.observation["total"] for r in results] == list(range(1, 33))
        assert (await env.state()).step_count == 32
        assert srv.manager.load.pipelined_messages >= 1
