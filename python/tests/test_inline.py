"""Inline execution of fast sync hooks (openenv.runtime.inline), over a real gRPC server: a hook
measured consistently fast moves from the worker threads onto the event loop, a slow one (CPU
or waiting) stays on the threads, one that becomes slow goes back at once, and opted-out
environments, process isolation and short deadlines keep every call on a thread.

Every step reports where it ran (its thread's name, and whether an asyncio loop was visible), so
the tests observe placement, never time. "Slow" is unambiguous (20 ms of CPU, or a sleep, against
a threshold of 1 ms) and "fast" is a trivial call, waited for over many calls. On a loaded machine
an inline call may still be descheduled past the threshold and send the hook back to the threads
(as it should); the tests allow for that by checking the counters, or by trying again."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from openenv_testkit import running

import openenv
from openenv.runtime.inline import INLINE_WALL_FACTOR, PROBE_CALLS, WALL_FACTOR, InlinePolicy
from openenv.runtime.session import EnvironmentRuntime

pytestmark = pytest.mark.anyio

THRESHOLD_S = 1e-3  # fast: a trivial call; slow: SPIN_S of CPU, 20x over
SPIN_S = 0.02
MAX_CALLS = 3000  # bound on waiting for a fast hook to go inline (it needs PROBE_CALLS in a row)
TRIES = 5  # an inline call descheduled past the threshold reverts: try such a sequence again


class Where(openenv.Environment):
    """Each step's observation says where it ran. ``{"spin": s}`` burns s of CPU, ``{"sleep": s}``
    sleeps, ``{"raise": m}`` raises (its message names the thread)."""

    max_sessions = 8

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> dict[str, Any]:
        return _where()

    def step(self, action: Any) -> dict[str, Any]:
        if action.get("spin"):
            end = time.thread_time() + float(action["spin"])
            while time.thread_time() < end:
                pass
        if action.get("sleep"):
            time.sleep(float(action["sleep"]))
        if action.get("raise"):
            raise ValueError(f"{action['raise']} on {threading.current_thread().name}")
        return _where()


class OptedOut(Where):
    inline_threshold_s = 0.0


class OwnThreshold(Where):
    inline_threshold_s = THRESHOLD_S


def _where() -> dict[str, Any]:
    return {"thread": threading.current_thread().name, "loop": asyncio._get_running_loop() is not None}


def _on_loop(obs: dict[str, Any]) -> bool:
    return obs["thread"] == threading.current_thread().name  # the server shares the test's loop


def _on_thread(obs: dict[str, Any]) -> bool:
    return obs["thread"].startswith("openenv-env")


async def _until_inline(env: openenv.EnvClient) -> int:
    """Step with a trivial action until a step runs on the loop; the number of steps it took."""
    for n in range(1, MAX_CALLS + 1):
        obs = (await env.step({})).observation
        if _on_loop(obs):
            return n
        assert _on_thread(obs)
    pytest.fail(f"a trivial step never went inline in {MAX_CALLS} calls")


async def _inline_then(env: openenv.EnvClient, action: Any, **kwargs: Any) -> Any:
    """Bring the hook inline, then step ``action`` on the loop (retried if a revert came between)."""
    for _ in range(TRIES):
        await _until_inline(env)
        try:
            obs = (await env.step(action, **kwargs)).observation
        except openenv.EnvError as e:
            if f"on {threading.current_thread().name}" in e.message:
                return e
            continue
        if _on_loop(obs):
            return obs
    pytest.fail(f"{action} never ran right after the hook went inline ({TRIES} tries)")


async def test_a_fast_sync_hook_moves_onto_the_loop_after_a_run_of_fast_calls() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        first = (await env.reset()).observation
        assert _on_thread(first)  # every hook starts on the threads
        n = await _until_inline(env)
        assert n > PROBE_CALLS  # never before PROBE_CALLS fast threaded calls
        hook = srv.runtime.inline.hooks["step"]  # type: ignore[union-attr]
        assert hook.inline_calls >= 1
        seen = [first]
        for _ in range(20):  # it stays inline; it leaves the loop only by a revert (a slow call)
            reverts = hook.reverts
            obs = (await env.step({})).observation
            assert _on_loop(obs) or hook.reverts > reverts or not hook.inline
            seen.append(obs)
        assert not any(o["loop"] for o in seen)  # the running loop is hidden, as on a thread
        assert (await env.state()).step_count == n + 20


async def test_a_slow_sync_hook_stays_on_the_threads() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        for _ in range(PROBE_CALLS + 2):
            assert _on_thread((await env.step({"spin": SPIN_S})).observation)
        hook = srv.runtime.inline.hooks["step"]  # type: ignore[union-attr]
        assert not hook.inline and hook.fast == 0 and hook.inline_calls == 0


async def test_a_hook_that_waits_stays_on_the_threads_though_it_uses_no_cpu() -> None:
    threshold = 2e-4  # the wall bound is WALL_FACTOR x this: 20 ms; each step sleeps 3x that
    async with running(Where, inline_threshold_s=threshold) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        for _ in range(PROBE_CALLS + 2):
            assert _on_thread((await env.step({"sleep": 3 * WALL_FACTOR * threshold})).observation)
        assert srv.runtime.inline.hooks["step"].inline_calls == 0  # type: ignore[union-attr]


async def test_a_hook_that_becomes_slow_goes_back_to_the_threads_and_is_probed_again_later() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        hook = srv.runtime.inline.hooks.get("step")
        for _ in range(TRIES):
            await _until_inline(env)
            hook = srv.runtime.inline.hooks["step"]  # type: ignore[union-attr]
            reverts = hook.reverts
            slow = (await env.step({"spin": SPIN_S})).observation
            if _on_loop(slow):  # that call ran inline (nothing could know it would be slow) ...
                break
        else:
            pytest.fail("the slow step never ran right after the hook went inline")
        assert hook is not None and hook.reverts == reverts + 1 and not hook.inline
        assert hook.needed == PROBE_CALLS << hook.strikes and hook.strikes >= 1
        needed = hook.needed
        assert _on_thread((await env.step({})).observation)  # ... and the next one is on a thread again
        n = await _until_inline(env)
        assert n >= needed - 1  # the re-probe needs twice as many fast calls (or more)
        reverts = hook.reverts
        waited = await _inline_then(env, {"sleep": 3 * WALL_FACTOR * THRESHOLD_S})  # waiting, no CPU
        assert _on_loop(waited) and hook.reverts > reverts and not hook.inline  # reverts too


async def test_opted_out_classes_and_a_zero_server_threshold_never_go_inline() -> None:
    for cls, kwargs in ((OptedOut, {"inline_threshold_s": THRESHOLD_S}), (Where, {"inline_threshold_s": 0.0})):
        async with running(cls, **kwargs) as srv, openenv.EnvClient(srv.address) as env:
            assert srv.runtime.inline is None
            await env.reset()
            for _ in range(3 * PROBE_CALLS):
                assert _on_thread((await env.step({})).observation)


async def test_a_class_threshold_overrides_the_servers_and_the_environment_variable_sets_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENENV_INLINE_THRESHOLD_US", "250")
    assert EnvironmentRuntime(Where).inline.threshold_s == pytest.approx(250e-6)  # type: ignore[union-attr]
    assert EnvironmentRuntime(OwnThreshold).inline.threshold_s == THRESHOLD_S  # type: ignore[union-attr]
    assert EnvironmentRuntime(OwnThreshold, inline_threshold_s=0.0).inline is None  # the server's off switch wins
    monkeypatch.setenv("OPENENV_INLINE_THRESHOLD_US", "0")
    assert EnvironmentRuntime(Where).inline is None
    monkeypatch.setenv("OPENENV_INLINE_THRESHOLD_US", "fast")
    with pytest.raises(ValueError, match="microseconds"):
        EnvironmentRuntime(Where)
    with pytest.raises(ValueError, match=">= 0"):
        EnvironmentRuntime(Where, inline_threshold_s=-1.0)


async def test_process_isolation_and_loop_environments_have_no_inline_policy() -> None:
    assert EnvironmentRuntime(Where, isolation="process").inline is None  # every call is a pipe round trip

    class OnLoop(Where):
        run_in_thread = False

    assert EnvironmentRuntime(OnLoop).inline is None  # always on the loop already


async def test_an_inline_hooks_exception_is_the_requests_and_the_session_goes_on() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        err = await _inline_then(env, {"raise": "broken"})
        assert isinstance(err, openenv.EnvError) and err.code == openenv.ErrorCode.INTERNAL
        assert err.message.startswith("ValueError: broken on ")  # raised on the loop's thread
        assert (await env.step({})).observation["loop"] is False  # the session goes on
        assert srv.runtime.inline.hooks["step"].inline_calls >= 2  # type: ignore[union-attr]


async def test_a_short_deadline_keeps_the_call_on_a_thread() -> None:
    # A 10 ms threshold: the threaded step below then has a 5 s deadline (a trivial step must
    # meet it on a worker thread, which a loaded machine can deschedule for a good while).
    threshold_s = 10 * THRESHOLD_S
    policy = InlinePolicy(threshold_s)
    assert policy.min_timeout_s == pytest.approx(10.0)  # DEADLINE_FACTOR x the threshold
    async with running(Where, inline_threshold_s=threshold_s) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        await _until_inline(env)
        # under 1000x the threshold: on a thread whatever the hook's state
        assert _on_thread((await env.step({}, step_timeout=5.0)).observation)
        assert _on_loop(await _inline_then(env, {}, step_timeout=30.0))  # far above it: inline
        with pytest.raises(openenv.DeadlineExceeded):  # a slow step under a deadline: on a thread
            await env.step({"sleep": 0.5}, step_timeout=0.05)


def test_a_hook_that_waits_briefly_goes_inline_at_most_once_per_probe() -> None:
    """A hook waiting on fast I/O (wall time between the inline and the threaded bounds, no CPU)
    passes the lenient threaded test, then its first inline call sends it back: the loop never
    serialises such waits. (The policy's arithmetic alone: times are given, not measured.)"""
    policy = InlinePolicy(THRESHOLD_S)
    wait_s = (INLINE_WALL_FACTOR + 1) * THRESHOLD_S
    assert wait_s < policy.max_wall_s  # fast enough for the threaded test ...
    hook = policy.hook("step")
    for _ in range(PROBE_CALLS):
        policy.threaded(hook, wait_s, cpu_seconds=THRESHOLD_S / 10)
    assert hook.inline
    policy.ran_inline(hook, wait_s, cpu_seconds=THRESHOLD_S / 10)  # ... not for the loop
    assert not hook.inline and hook.reverts == 1 and hook.needed == 2 * PROBE_CALLS
    hook.inline = True
    policy.ran_inline(hook, THRESHOLD_S / 2, cpu_seconds=THRESHOLD_S / 10)  # a truly fast call stays inline
    assert hook.inline and hook.reverts == 1
