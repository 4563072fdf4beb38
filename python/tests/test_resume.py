"""Sessions that survive (RFC 0006): a dropped connection is resumed with exactly-once steps,
and snapshot / restore / fork continue episodes exactly. Connections are really dropped: the
client talks to the server through a loopback TCP proxy the test resets."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any, ClassVar

import grpc
import pytest
from openenv_testkit import RawSession, running, target, wait_until
from tcp_proxy import TcpProxy

import openenv
from openenv.v1 import environment_pb2, error_pb2, payload_pb2
from openenv.values import to_value

pytestmark = [pytest.mark.anyio, pytest.mark.timing]

WAIT = 60.0  # bound of every wait here (never a timing assertion)


class Gated(openenv.Environment):
    """Counts every step it applies (class-wide); the step numbered ``block_at`` waits for
    ``gate``, so a test can drop the connection while that step is in flight."""

    name = "gated"
    action_type: ClassVar[Any] = {"type": "integer"}
    observation_type: ClassVar[Any] = {"type": "object"}
    deterministic = True
    snapshots = True
    run_in_thread = False
    max_episode_steps = 100
    applied = 0
    block_at = 0
    entered: asyncio.Event
    gate: asyncio.Event

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.rng = random.Random(seed)
        self.total = 0
        return {"total": 0}

    async def step(self, action: int) -> openenv.StepResult:
        cls = type(self)
        cls.applied += 1
        if cls.applied == cls.block_at:
            cls.entered.set()
            await cls.gate.wait()
        self.total += action
        return openenv.StepResult({"total": self.total, "noise": self.rng.random()}, reward=float(action))

    def state(self) -> dict[str, Any]:
        return {"total": getattr(self, "total", 0)}


@pytest.fixture(autouse=True)
def _fresh_gated() -> None:
    Gated.applied, Gated.block_at = 0, 0
    Gated.entered, Gated.gate = asyncio.Event(), asyncio.Event()


async def test_a_dropped_connection_mid_episode_loses_and_repeats_no_step() -> None:
    """The issue's acceptance test: steps pipelined, the connection reset while one runs in
    the environment and others wait behind it; the client finishes the episode with exactly
    the expected step count and rewards, and the environment applied each step once."""
    Gated.block_at = 4
    deltas = list(range(1, 11))
    async with running(Gated) as srv, TcpProxy(srv.port or 0) as proxy:
        async with openenv.EnvClient(f"grpc://127.0.0.1:{proxy.port}") as env:
            conn = env.connection
            assert isinstance(conn, openenv.client.GrpcConnection) and conn.resume_token
            await env.reset(seed=3)
            steps = [asyncio.ensure_future(env.step(d)) for d in deltas]  # all in flight at once
            await asyncio.wait_for(Gated.entered.wait(), WAIT)  # step 4 is inside the environment
            assert proxy.drop() >= 1
            Gated.gate.set()
            results = await asyncio.wait_for(asyncio.gather(*steps), WAIT)
            assert conn.resumes >= 1
            assert [r.step_count for r in results] == list(range(1, 11))
            assert [r.reward for r in results] == [float(d) for d in deltas]
            assert [r.observation["total"] for r in results] == [sum(deltas[: i + 1]) for i in range(10)]
            assert Gated.applied == 10, "a step was applied twice or lost"
            st = await env.state()
            assert st.step_count == 10 and st.state == {"total": 55}
        await wait_until(lambda: srv.manager.active == 0, WAIT, "the session to close")


async def test_repeated_drops_keep_the_episode_exact() -> None:
    async with running(Gated) as srv, TcpProxy(srv.port or 0) as proxy:
        async with openenv.EnvClient(f"grpc://127.0.0.1:{proxy.port}") as env:
            conn = env.connection
            assert isinstance(conn, openenv.client.GrpcConnection)
            await env.reset(seed=1)
            for i in range(1, 6):
                pending = [asyncio.ensure_future(env.step(1)) for _ in range(3)]
                proxy.drop()
                done = await asyncio.wait_for(asyncio.gather(*pending), WAIT)
                assert [r.step_count for r in done] == [3 * i - 2, 3 * i - 1, 3 * i]
            assert Gated.applied == 15
            assert (await env.state()).step_count == 15


async def test_a_session_not_resumed_within_its_grace_period_fails_clearly() -> None:
    async with running(Gated, resume_grace_s=1.0) as srv, TcpProxy(srv.port or 0) as proxy:
        env = openenv.EnvClient(f"grpc://127.0.0.1:{proxy.port}")
        await env.connect()
        try:
            await env.reset(seed=1)
            await proxy.stop_listening()  # the server is unreachable until after the grace period
            with pytest.raises(openenv.Aborted) as caught:
                await asyncio.wait_for(env.step(1), WAIT)
            assert "grace period" in caught.value.message and caught.value.fatal
        finally:
            await env.close()
        await wait_until(lambda: srv.manager.active == 0, WAIT, "the parked session to expire")
        assert Gated.applied == 0


async def test_a_resume_token_of_a_closed_session_is_aborted() -> None:
    async with running(Gated) as srv:
        async with openenv.EnvClient(srv.address) as env:
            conn = env.connection
            assert isinstance(conn, openenv.client.GrpcConnection)
            token = conn.resume_token
        async with RawSession(target(srv)) as s:
            resp = await s.request(
                environment_pb2.SessionRequest(
                    handshake=environment_pb2.HandshakeRequest(protocol_version="1.0", resume_token=token)
                )
            )
            assert resp.error.code == error_pb2.ERROR_CODE_ABORTED
            assert resp.error.fatal and "gone" in resp.error.message


def _step(delta: int, rid: int) -> environment_pb2.SessionRequest:
    return environment_pb2.SessionRequest(
        request_id=rid, step=environment_pb2.StepRequest(action=payload_pb2.Payload(json=to_value(delta)))
    )


async def test_a_replayed_request_id_is_answered_from_the_record_on_a_new_stream() -> None:
    async with running(Gated) as srv:
        s1 = RawSession(target(srv))
        hs = await s1.request(
            environment_pb2.SessionRequest(
                request_id=1, handshake=environment_pb2.HandshakeRequest(protocol_version="1.0", resumable=True)
            )
        )
        token = hs.handshake.resume_token
        assert token and not hs.handshake.resumed
        await s1.request(environment_pb2.SessionRequest(request_id=2, reset=environment_pb2.ResetRequest(seed=5)))
        first = await s1.request(_step(7, 3))
        s1.call.cancel()  # drop the stream without a close request, as a lost connection does
        await s1.channel.close()
        async with RawSession(target(srv)) as s2:
            again = await s2.request(
                environment_pb2.SessionRequest(
                    request_id=4, handshake=environment_pb2.HandshakeRequest(protocol_version="1.0", resume_token=token)
                )
            )
            assert again.handshake.resumed and again.handshake.session_id == hs.handshake.session_id
            replay = await s2.request(_step(7, 3))
            assert replay == first and Gated.applied == 1
            clash = await s2.request(_step(8, 3))  # same id, another request
            assert clash.error.code == error_pb2.ERROR_CODE_INVALID_ARGUMENT
            nxt = await s2.request(_step(1, 5))
            assert nxt.step.time_step.step_count == 2 and Gated.applied == 2


async def test_a_client_without_resume_gets_the_old_behaviour() -> None:
    async with running(Gated) as srv:
        async with openenv.EnvClient(srv.address, resume=False) as env:
            conn = env.connection
            assert isinstance(conn, openenv.client.GrpcConnection) and not conn.resume_token
            await env.reset()
            await env.abort()
        await wait_until(lambda: srv.manager.active == 0, WAIT, "the dropped session to close at once")


# ---------------------------------------------------------------------------- snapshots


async def test_restore_replays_the_same_observations_rewards_and_flags() -> None:
    async with running(Gated) as srv, openenv.EnvClient(srv.address) as env:
        assert env.info is not None and env.info.capabilities.snapshots
        await env.reset(seed=11)
        await env.step(2)
        snap = await env.snapshot()
        assert (snap.env_name, snap.step_count) == ("gated", 1) and snap.digest
        original = [await env.step(d) for d in (1, 2, 3)]
        restored = await env.restore(snap)
        assert restored.step_count == 1 and restored.status is openenv.EpisodeStatus.RUNNING
        again = [await env.step(d) for d in (1, 2, 3)]
        assert [(r.observation, r.reward, r.step_count, r.episode_id) for r in again] == [
            (r.observation, r.reward, r.step_count, r.episode_id) for r in original
        ]


async def test_forks_start_from_the_same_state_and_are_independent() -> None:
    async with running(Gated) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=4)
        await env.step(5)
        forks = await env.fork(3)
        try:
            assert len({f.session_id for f in forks} | {env.session_id}) == 4
            firsts = [await f.step(1) for f in forks]
            assert len({(r.observation["noise"], r.step_count) for r in firsts}) == 1  # the same start
            await forks[0].step(100)
            assert [(await f.state()).state["total"] for f in forks] == [106, 6, 6]
            assert (await env.state()).state == {"total": 5}
        finally:
            for f in forks:
                await f.close()
        await wait_until(lambda: srv.manager.active == 1, WAIT, "the forks to close")


async def test_foreign_and_altered_snapshots_are_refused_and_change_nothing() -> None:
    async with running(Gated) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=2)
        snap = await env.snapshot()
        await env.step(3)
        foreign = environment_pb2.Snapshot()
        foreign.CopyFrom(snap)
        foreign.env_name = "another_env"
        with pytest.raises(openenv.FailedPrecondition, match="another_env"):
            await env.restore(foreign)
        newer = environment_pb2.Snapshot()
        newer.CopyFrom(snap)
        newer.env_version = "9.9.9"
        with pytest.raises(openenv.FailedPrecondition, match=r"9\.9\.9"):
            await env.restore(newer)
        altered = environment_pb2.Snapshot()
        altered.CopyFrom(snap)
        altered.step_count = 50
        with pytest.raises(openenv.InvalidArgument, match="digest"):
            await env.restore(altered)
        with pytest.raises(openenv.FailedPrecondition):
            await env.fork(1, snapshot=foreign)
        st = await env.state()
        assert st.step_count == 1 and st.state == {"total": 3}
        assert srv.manager.active == 1  # no fork was opened


class Plain(Gated):
    name = "plain"
    snapshots = False


class Unpicklable(Gated):
    name = "unpicklable"

    def reset(self, **kw: Any) -> dict[str, Any]:
        self.handle = open(__file__)  # an open file does not pickle
        return super().reset(**kw)

    def close(self) -> None:
        handle = getattr(self, "handle", None)
        if handle is not None:
            handle.close()


async def test_snapshots_are_unimplemented_where_not_offered_or_not_possible() -> None:
    async with running(Plain) as srv, openenv.EnvClient(srv.address) as env:
        assert env.info is not None and not env.info.capabilities.snapshots
        await env.reset()
        with pytest.raises(openenv.Unimplemented, match="snapshots"):
            await env.snapshot()
        with pytest.raises(openenv.Unimplemented):
            await env.fork(2)
        assert (await env.step(1)).step_count == 1  # the session goes on
    async with running(Unpicklable) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        with pytest.raises(openenv.Unimplemented, match="does not pickle"):
            await env.snapshot()


async def test_fork_beyond_capacity_is_refused_and_the_session_goes_on() -> None:
    async with running(Gated, max_sessions=3) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        with pytest.raises(openenv.ResourceExhausted):
            await env.fork(3)
        assert srv.manager.active == 1
        forks = await env.fork(2)
        for f in forks:
            await f.close()
        assert (await env.step(1)).step_count == 1


async def test_unclaimed_forks_are_closed_after_the_grace_period() -> None:
    async with running(Gated, resume_grace_s=0.5) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            await s.request(environment_pb2.SessionRequest(reset=environment_pb2.ResetRequest()))
            resp = await s.request(environment_pb2.SessionRequest(fork=environment_pb2.ForkRequest(count=2)))
            assert len(resp.fork.resume_tokens) == 2
            await wait_until(lambda: srv.manager.active == 1, WAIT, "the unclaimed forks to close")


def test_aborted_is_in_the_error_table() -> None:
    assert openenv.ErrorCode.ABORTED == 10 == grpc.StatusCode.ABORTED.value[0]


def test_the_blocking_client_snapshots_restores_and_forks() -> None:
    from openenv_testkit import server_thread

    with server_thread(Gated) as srv, openenv.EnvClient(srv.address).sync() as env:
        env.reset(seed=9)
        snap = env.snapshot()
        a = env.step(1)
        assert env.restore(snap).step_count == 0
        assert env.step(1).observation == a.observation
        forks = env.fork(2)
        try:
            assert [f.step(2).step_count for f in forks] == [2, 2]  # from the parent, one step in
        finally:
            for f in forks:
                f.close()


async def test_a_resume_takes_the_session_over_from_a_stream_the_server_still_holds() -> None:
    """The client saw the drop before the server did: the old stream is ended, the new one
    gets the session with its episode."""
    async with running(Gated) as srv, RawSession(target(srv)) as old, RawSession(target(srv)) as new:
        hs = await old.open(resumable=True)
        await old.request(reset=environment_pb2.ResetRequest(seed=1))
        await old.request(_step(2, 0))
        new._next = 5000  # request ids are the session's: the new stream must not reuse the old one's
        again = await new.open(resume_token=hs.resume_token)
        assert again.resumed and again.session_id == hs.session_id
        assert (await old.ended()).code == grpc.StatusCode.ABORTED
        st = await new.request(state=environment_pb2.StateRequest())
        assert st.state.step_count == 1 and Gated.applied == 1
        assert srv.manager.active == 1


async def test_draining_closes_parked_sessions_at_once() -> None:
    srv = openenv.Server(Gated, "127.0.0.1", 0, resume_grace_s=3600.0)
    await srv.start()
    try:
        s = RawSession(target(srv))
        await s.open(resumable=True)
        s.call.cancel()  # dropped: parked for an hour
        await s.channel.close()
        await wait_until(lambda: srv.manager.active == 1, WAIT, "the session to be parked")
    finally:
        await asyncio.wait_for(srv.stop(grace_s=WAIT), 3 * WAIT)  # the drain closes it, not the hour
    assert srv.manager.active == 0


# ---------------------------------------------------------------------------- the journal's cost


async def test_a_resumable_session_costs_no_task_per_request_over_a_plain_one() -> None:
    """Issue 49: the resume journal costs nothing for a request that is not re-sent. A
    resumable session's requests run in one worker task per stream (a drop must not cancel a
    request in flight), not in a task each: over 60 steps it creates no more tasks than a
    session without resume, counted by the loop's task factory (in-process, both halves)."""
    import openenv.testing

    loop = asyncio.get_running_loop()
    created = 0

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kw)

    async def tasks_per_60_steps(resume: bool) -> int:
        nonlocal created
        async with openenv.testing.InProcessServer(Gated) as server, server.client(resume=resume) as env:
            await env.reset()
            await env.step(1)  # warm: anything created once per session is not counted
            before = created
            for _ in range(60):
                await env.step(1)
            return created - before

    old = loop.get_task_factory()
    loop.set_task_factory(factory)
    try:
        plain = await tasks_per_60_steps(False)
        resumable = await tasks_per_60_steps(True)
    finally:
        loop.set_task_factory(old)
    assert resumable <= plain, (resumable, plain)
