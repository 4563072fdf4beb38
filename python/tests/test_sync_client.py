"""The blocking client (``EnvClient(...).sync()``), against servers in their own thread
or subprocess: scripts and notebooks have no event loop of their own (or one that is
already running)."""

from __future__ import annotations

import asyncio

import pytest
from openenv_testenvs import Counter, Failing, Scripted, ToolEnv
from openenv_testkit import server_thread

import openenv
from openenv.errors import ErrorCode

pytestmark = pytest.mark.timing


def test_sync_reset_step_state() -> None:
    with server_thread(Counter) as srv, openenv.EnvClient(srv.address, options={"tag": "s"}).sync() as env:
        assert env.info is not None and env.info.name == "counter"
        r = env.reset(seed=10)
        assert r.observation == {"total": 10, "tag": "s"} and r.reward is None and r.step_count == 0
        r = env.step({"delta": 5})
        assert r.observation["total"] == 15 and r.reward == 5.0 and r.metadata == {"delta": 5}
        r = env.step(Counter.action_type(delta=-1, finish="terminated"))
        assert r.terminated and r.done
        st = env.state()
        assert st.status is openenv.EpisodeStatus.TERMINATED and st.step_count == 2
        assert st.state == {"total": 14, "history": [5, -1], "tag": "s"}


def test_sync_tools() -> None:
    with server_thread(ToolEnv) as srv, openenv.EnvClient(srv.address).sync() as env:
        assert [t.name for t in env.list_tools()] == ["add", "explode", "nap"]
        assert env.call_tool("add", {"a": 1, "b": 2}).data == 3
        assert env.call_tool("explode").is_error
        with pytest.raises(openenv.NotFound):
            env.call_tool("nope")


def test_sync_errors_raise_the_table_classes() -> None:
    with server_thread(Failing) as srv, openenv.EnvClient(srv.address).sync() as env:
        with pytest.raises(openenv.FailedPrecondition):
            env.step({"x": 1})
        env.reset()
        with pytest.raises(openenv.Internal) as exc:
            env.step({"x": 1})
        assert exc.value.code == ErrorCode.INTERNAL and "ValueError: boom" in str(exc.value)
        with pytest.raises(openenv.Unimplemented):
            env.list_tools()


def test_sync_client_timeout_keeps_the_session_in_step() -> None:
    """A client-side timeout raises DeadlineExceeded; the late answer is dropped and the
    next call gets its own answer (the blocked step is released only after the timeout)."""
    with server_thread(Scripted) as srv, openenv.EnvClient(srv.address).sync() as env:
        env.reset()
        try:
            with pytest.raises(openenv.DeadlineExceeded):  # client-side timeout
                env.step({"op": "block"}, timeout=0.05)
        finally:
            Scripted.gate.set()  # the server-side step ends now, after the client gave up
        assert env.step({"op": "echo", "value": 7}).observation == 7  # not the blocked step's answer
        assert env.state().step_count == 2


def test_sync_connect_errors() -> None:
    with server_thread(Counter, max_sessions=1) as srv:
        with openenv.EnvClient(srv.address).sync():
            with pytest.raises(openenv.ResourceExhausted) as exc:
                openenv.EnvClient(srv.address).sync().connect()
            assert exc.value.fatal
    with pytest.raises(openenv.Unavailable):  # nothing listens there any more
        openenv.EnvClient(srv.address, connect_timeout=0.5).sync().connect()


def test_sync_after_close_raises() -> None:
    with server_thread(Counter) as srv:
        env = openenv.EnvClient(srv.address).sync()
        env.connect()
        env.reset()
        env.close()
        for call in (lambda: env.reset(), lambda: env.step({"delta": 1}), env.state, env.list_tools):
            with pytest.raises(openenv.EnvError):
                call()
        env.close()  # idempotent


def test_sync_client_inside_a_running_event_loop() -> None:
    """A notebook cell: a coroutine (the kernel's running loop) calls plain functions that
    use the blocking client. Its own loop thread means no deadlock and no 'loop already
    running' error."""

    def notebook_cell(url: str) -> list[int]:
        with openenv.EnvClient(url).sync() as env:
            env.reset(seed=1)
            return [env.step({"delta": d}).observation["total"] for d in (1, 2, 3)]

    async def kernel(url: str) -> list[int]:
        asyncio.get_running_loop()  # a loop is running in this thread
        return notebook_cell(url)

    with server_thread(Counter) as srv:
        assert asyncio.run(asyncio.wait_for(kernel(srv.address), 30)) == [2, 4, 7]


def test_sync_client_inside_the_servers_own_loop() -> None:
    """Even from a coroutine on the very loop that runs the server (blocking that loop
    would deadlock a naive wrapper): call it from a worker thread of that loop."""

    async def main() -> list[int]:
        async with openenv.Server(Counter, "127.0.0.1", 0) as srv:

            def cell() -> list[int]:
                with openenv.EnvClient(srv.address).sync() as env:
                    env.reset()
                    return [env.step({"delta": 2}).observation["total"] for _ in range(3)]

            return await asyncio.wait_for(asyncio.to_thread(cell), 30)

    assert asyncio.run(main()) == [2, 4, 6]
