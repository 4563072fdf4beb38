"""How sessions end (docs/protocol.md §3.7, §3.8): every way frees the slot and calls the
environment's ``close()`` exactly once, and the server survives all of them."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from openenv_testenvs import AsyncCounter, AsyncSlow, CloseRaises, Counter, Scripted
from openenv_testkit import (
    TESTS_DIR,
    WAIT_S,
    RawSession,
    error_of,
    get_info,
    ok,
    running,
    target,
    until_raises,
    wait_released,
    wait_until,
)

import openenv
from openenv.v1 import environment_pb2, payload_pb2
from openenv.values import to_value

pytestmark = [pytest.mark.anyio, pytest.mark.timing]

OPENENV_CLI = str(Path(sys.executable).parent / "openenv")


def _step(value: object) -> environment_pb2.SessionRequest:
    return environment_pb2.SessionRequest(
        step=environment_pb2.StepRequest(action=payload_pb2.Payload(json=to_value(value)))
    )


@pytest.mark.parametrize("env_cls", [Counter, AsyncCounter])
async def test_cancelled_call_frees_its_session(env_cls: type[Counter]) -> None:
    async with running(env_cls) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")
            assert srv.manager.active == 1
            s.call.cancel()
            await wait_released(srv, env_cls)
        async with openenv.EnvClient(srv.address) as env:  # the server is unaffected
            await env.reset()


async def test_disconnect_during_a_step_waits_for_it_before_close() -> None:
    """close() never overlaps a call still running on the same instance."""
    async with running(Scripted) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")
            await s.send(_step({"op": "block"}))
            await wait_until(Scripted.entered.is_set, what="the step to start")
            s.call.cancel()
            await wait_until(lambda: srv.manager.active == 0, what="the slot to be freed")
        Scripted.gate.set()
        await wait_released(srv, Scripted)
        assert Scripted.overlaps == 0


async def test_disconnect_during_an_async_step_cancels_it_then_closes() -> None:
    async with running(AsyncSlow) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")
            await s.send(_step({"s": 30}))
            await wait_until(
                lambda: srv.manager.sessions and all(x.busy for x in srv.manager.sessions.values()),
                what="the step to start",
            )
            s.call.cancel()
            await wait_released(srv, AsyncSlow)
        assert AsyncSlow.cancelled == 1


async def test_half_close_answers_pending_requests_then_ends_ok() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            await s.send(reset=environment_pb2.ResetRequest())
            await s.send(_step({"delta": 3}))
            await s.call.done_writing()
            ok(await s.recv(), "reset")
            assert ok(await s.recv(), "step").time_step.step_count == 1
            assert (await s.ended()).code == grpc.StatusCode.OK
        await wait_released(srv, Counter)


async def test_close_request_answers_then_ends_and_ignores_later_requests() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            rid = await s.send(close=environment_pb2.CloseRequest())
            raced = False
            try:  # pipelined after close: never answered (the write may also fail: the stream is over)
                await s.send(state=environment_pb2.StateRequest())
            except asyncio.InvalidStateError:
                pass  # the call had ended before the write
            except grpc.aio.AioRpcError:
                # The write raced the server's end of the call (seen on a loaded machine): grpc.aio
                # then marks its own call INTERNAL ("Failed execute_batch"), hiding the server's
                # status and answers; only the slot's release is left to check.
                raced = True
            if not raced:
                resp = await s.recv()
                assert resp.request_id == rid and resp.WhichOneof("kind") == "close"
                assert (await s.ended()).code == grpc.StatusCode.OK
        await wait_released(srv, Counter)


async def test_client_close_then_calls_raise() -> None:
    async with running(Counter) as srv:
        env = openenv.EnvClient(srv.address)
        await env.connect()
        await env.reset()
        await env.close()
        await wait_released(srv, Counter)
        with pytest.raises(openenv.FailedPrecondition) as exc:
            await env.step({"delta": 1})
        assert exc.value.fatal
        await env.close()  # idempotent
        assert Counter.closed == 1


async def test_killed_client_process_frees_its_session() -> None:
    # The client's session is resumable (RFC 0006): the server keeps it for the resume grace
    # period, shortened here, in case the client comes back; then it frees it.
    async with running(Counter, resume_grace_s=0.5) as srv:
        code = (
            "import asyncio, openenv\n"
            "async def main():\n"
            f"    env = openenv.EnvClient({srv.address!r})\n"
            "    await env.connect()\n"
            "    await env.reset(seed=1)\n"
            "    print('ready', flush=True)\n"
            "    await asyncio.sleep(60)\n"
            "asyncio.run(main())\n"
        )
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE)
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S * 6)  # type: ignore[union-attr]
            assert line.strip() == b"ready"
            assert srv.manager.active == 1 and Counter.created == 1
            proc.kill()  # no goodbye: the kernel closes the socket
            await asyncio.wait_for(proc.wait(), WAIT_S)
            await wait_released(srv, Counter)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert (await get_info(target(srv))).name == "counter"


async def test_idle_session_is_reaped_with_deadline_exceeded() -> None:
    async with running(Counter, idle_timeout_s=0.3) as srv:
        info = await get_info(target(srv))
        assert info.capabilities.idle_timeout.ToNanoseconds() == 300_000_000
        async with RawSession(target(srv)) as s:
            await s.open()
            ended = await s.ended()  # nothing sent: the reaper ends the stream
            assert ended.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "idle" in ended.details
        await wait_released(srv, Counter)
        # Nothing is sent after the handshake here either: any request would have to reach the
        # server within the short idle timeout, which a loaded machine does not guarantee.
        async with openenv.EnvClient(srv.address) as env:
            await wait_until(lambda: srv.manager.active == 0, what="the idle client to be reaped")
            # The client may not have read the stream's status yet: a call made now still gets
            # that status (DEADLINE_EXCEEDED), never the finished call's UNAVAILABLE.
            with pytest.raises(openenv.DeadlineExceeded) as exc:
                await env.state()
            assert exc.value.fatal


async def test_a_request_in_progress_is_not_idle() -> None:
    idle = 1.0
    async with running(Scripted, idle_timeout_s=idle) as srv:
        async with openenv.EnvClient(srv.address) as env:
            # reset and step are written back to back right after the handshake (neither waits for
            # an answer first), so the session is not idle long before the step starts even on a
            # loaded machine; the idle timeout is still short next to the wait below
            reset = asyncio.ensure_future(env.reset())
            step = asyncio.ensure_future(env.step({"op": "block"}))
            await wait_until(lambda: Scripted.entered.is_set() or step.done(), what="the step to start")
            assert Scripted.entered.is_set(), step.result()  # (a step that ended early raises its error here)
            await asyncio.wait_for(reset, WAIT_S)
            await asyncio.sleep(3 * idle)  # several idle periods pass while the step runs
            assert srv.manager.active == 1 and not step.done()
            Scripted.gate.set()
            assert (await asyncio.wait_for(step, WAIT_S)).observation == "unblocked"


async def test_close_that_raises_does_not_break_the_server() -> None:
    async with running(CloseRaises) as srv:
        for i in range(3):
            async with openenv.EnvClient(srv.address) as env:
                assert (await env.reset(seed=i)).observation["total"] == i
        await wait_released(srv, CloseRaises, closed=3)
        async with RawSession(target(srv)) as s:  # also when the close request triggers it
            await s.open()
            ok(await s.request(close=environment_pb2.CloseRequest()), "close")
        await wait_released(srv, CloseRaises, closed=4)
        assert (await get_info(target(srv))).name == "close_raises"


async def test_server_stop_closes_every_session_once_and_reports_not_serving() -> None:
    srv = openenv.Server(Scripted, "127.0.0.1", 0)
    await srv.start()
    stopping = None
    clients = [openenv.EnvClient(srv.address) for _ in range(3)]
    try:
        async with grpc.aio.insecure_channel(target(srv)) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for name in ("", "openenv.v1.EnvironmentService"):
                st = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=WAIT_S)
                assert st.status == health_pb2.HealthCheckResponse.SERVING
            for c in clients:
                await c.connect()
                await c.reset()
            busy = asyncio.ensure_future(clients[0].step({"op": "block"}))
            await wait_until(Scripted.entered.is_set, what="the step to start")
            stopping = asyncio.ensure_future(srv.stop(WAIT_S))
            await wait_until(lambda: srv.manager.draining, what="the drain to start")
            for name in ("", "openenv.v1.EnvironmentService"):
                st = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=WAIT_S)
                assert st.status == health_pb2.HealthCheckResponse.NOT_SERVING
            Scripted.gate.set()
            assert (await asyncio.wait_for(busy, WAIT_S)).observation == "unblocked"
        await asyncio.wait_for(stopping, WAIT_S + 5)
        assert Scripted.closed == 3 and srv.manager.active == 0
        for c in clients:
            with pytest.raises(openenv.Unavailable):
                await c.state()
    finally:
        Scripted.gate.set()
        for c in clients:
            await c.close()
        if stopping is None:
            await srv.stop(1.0)


async def test_sigterm_drains_the_cli_server_and_exits_zero(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = await asyncio.create_subprocess_exec(
        OPENENV_CLI,
        "serve",
        "openenv_testenvs:Counter",
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--grace",
        "3",
        cwd=str(TESTS_DIR),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR"},
    )
    try:
        await wait_until(ready.exists, timeout=WAIT_S * 6, what="the server's ready file")
        url = ready.read_text()
        assert url.startswith("grpc://127.0.0.1:")
        async with openenv.EnvClient(url) as env:
            assert (await env.reset(seed=4)).observation["total"] == 4
            proc.send_signal(signal.SIGTERM)
            err = await until_raises(lambda: env.step({"delta": 1}), openenv.Unavailable)
            assert isinstance(err, openenv.Unavailable) and err.fatal
        rc = await asyncio.wait_for(proc.wait(), WAIT_S * 2)
        assert rc == 0, (await proc.stderr.read()).decode()  # type: ignore[union-attr]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_new_handshake_after_capacity_frees_up_via_disconnect() -> None:
    async with running(Counter, max_sessions=1) as srv:
        async with RawSession(target(srv)) as first:
            await first.open()
            async with RawSession(target(srv)) as second:
                assert error_of(await second.handshake()).code == openenv.ErrorCode.RESOURCE_EXHAUSTED
            first.call.cancel()
            await wait_released(srv, Counter)
        async with RawSession(target(srv)) as third:
            await third.open()
