"""Inline execution of fast sync hooks (openenv.runtime.inline), over a real gRPC server: a hook
measured consistently fast moves from the worker threads onto the event loop, a slow one stays
on the threads, one that becomes slow goes back at once, and opted-out environments, process
isolation and short deadlines keep every call on a thread.

Every step reports where it ran (its thread's name, and whether an asyncio loop was visible), so
the tests observe placement, never time. "Slow" is unambiguous (a 20 ms sleep against a 1 ms
threshold) and "fast" is a trivial call against that 1 ms threshold, waited for over many calls:
a loaded machine can only delay when a hook goes inline, not whether."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from openenv_testkit import running

import openenv
from openenv.runtime.inline import PROBE_CALLS, InlinePolicy
from openenv.runtime.session import Runtime

pytestmark = pytest.mark.anyio

THRESHOLD_S = 1e-3  # fast = a trivial call; slow = SLOW_S, 20x over
SLOW_S = 0.02
MAX_CALLS = 3000  # bound on waiting for a fast hook to go inline (it needs PROBE_CALLS in a row)


class Where(openenv.Environment):
    """Each step's observation says where it ran; ``{"sleep": s}`` sleeps, ``{"raise": m}`` raises."""

    max_sessions = 8

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> dict[str, Any]:
        return _where()

    def step(self, action: Any) -> dict[str, Any]:
        if action.get("sleep"):
            time.sleep(float(action["sleep"]))
        if action.get("raise"):
            raise ValueError(action["raise"])
        return _where()


class OptedOut(Where):
    inline_threshold_s = 0.0


class OwnThreshold(Where):
    inline_threshold_s = THRESHOLD_S


def _where() -> dict[str, Any]:
    return {"thread": threading.current_thread().name, "loop": asyncio._get_running_loop() is not None}


def _on_loop(obs: dict[str, Any]) -> bool:
    return obs["thread"] == threading.current_thread().name  # the server shares the test's loop


async def _until_inline(env: openenv.EnvClient, action: Any = None) -> int:
    """Step with a fast action until a step runs on the loop; the number of steps it took."""
    for n in range(1, MAX_CALLS + 1):
        obs = (await env.step(action or {})).observation
        if _on_loop(obs):
            return n
        assert obs["thread"].startswith("openenv-env")
    pytest.fail(f"a trivial step never went inline in {MAX_CALLS} calls")


async def test_a_fast_sync_hook_moves_onto_the_loop_after_a_run_of_fast_calls() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        first = (await env.reset()).observation
        assert first["thread"].startswith("openenv-env")  # every hook starts on the threads
        n = await _until_inline(env)
        assert n > PROBE_CALLS  # never before PROBE_CALLS fast threaded calls
        hook = srv.runtime.inline.hooks["step"]  # type: ignore[union-attr]
        assert hook.inline and hook.reverts == 0
        more = [(await env.step({})).observation for _ in range(20)]
        assert all(_on_loop(o) for o in more)  # stays inline while fast
        assert not any(o["loop"] for o in [first, *more])  # the running loop is hidden, as on a thread
        assert (await env.state()).step_count == n + 20


async def test_a_slow_sync_hook_stays_on_the_threads() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        for _ in range(PROBE_CALLS + 2):
            obs = (await env.step({"sleep": SLOW_S})).observation
            assert obs["thread"].startswith("openenv-env")
        hook = srv.runtime.inline.hooks["step"]  # type: ignore[union-attr]
        assert not hook.inline and hook.fast == 0 and hook.inline_calls == 0


async def test_a_hook_that_becomes_slow_goes_back_to_the_threads_and_is_probed_again_later() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        await _until_inline(env)
        hook = srv.runtime.inline.hooks["step"]  # type: ignore[union-attr]
        slow = (await env.step({"sleep": SLOW_S})).observation
        assert _on_loop(slow)  # that one call ran inline (nothing can know it will be slow) ...
        assert not hook.inline and hook.reverts == 1 and hook.needed == 2 * PROBE_CALLS
        after = (await env.step({})).observation
        assert after["thread"].startswith("openenv-env")  # ... and the next one is on a thread again
        n = await _until_inline(env)
        assert n >= 2 * PROBE_CALLS - 1  # the second probe needs twice as many fast calls


async def test_opted_out_classes_and_a_zero_server_threshold_never_go_inline() -> None:
    for cls, kwargs in ((OptedOut, {"inline_threshold_s": THRESHOLD_S}), (Where, {"inline_threshold_s": 0.0})):
        async with running(cls, **kwargs) as srv, openenv.EnvClient(srv.address) as env:
            assert srv.runtime.inline is None
            await env.reset()
            for _ in range(3 * PROBE_CALLS):
                assert (await env.step({})).observation["thread"].startswith("openenv-env")


async def test_a_class_threshold_overrides_the_servers_and_the_environment_variable_sets_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENENV_INLINE_THRESHOLD_US", "250")
    assert Runtime(Where).inline.threshold_s == pytest.approx(250e-6)  # type: ignore[union-attr]
    assert Runtime(OwnThreshold).inline.threshold_s == THRESHOLD_S  # type: ignore[union-attr]
    assert Runtime(OwnThreshold, inline_threshold_s=0.0).inline is None  # the server's off switch wins
    monkeypatch.setenv("OPENENV_INLINE_THRESHOLD_US", "0")
    assert Runtime(Where).inline is None
    monkeypatch.setenv("OPENENV_INLINE_THRESHOLD_US", "fast")
    with pytest.raises(ValueError, match="microseconds"):
        Runtime(Where)
    with pytest.raises(ValueError, match=">= 0"):
        Runtime(Where, inline_threshold_s=-1.0)


async def test_process_isolation_and_loop_environments_have_no_inline_policy() -> None:
    assert Runtime(Where, isolation="process").inline is None  # every call is a pipe round trip

    class OnLoop(Where):
        run_in_thread = False

    assert Runtime(OnLoop).inline is None  # always on the loop already


async def test_an_inline_hooks_exception_is_the_requests_and_the_session_goes_on() -> None:
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        await _until_inline(env)
        with pytest.raises(openenv.EnvError, match="ValueError: broken"):
            await env.step({"raise": "broken"})
        assert srv.runtime.inline.hooks["step"].inline  # type: ignore[union-attr]  # a fast failure is fast
        assert _on_loop((await env.step({})).observation)


async def test_a_short_deadline_keeps_the_call_on_a_thread() -> None:
    policy = InlinePolicy(THRESHOLD_S)
    assert policy.min_timeout_s == pytest.approx(1.0)  # DEADLINE_FACTOR x the threshold
    async with running(Where, inline_threshold_s=THRESHOLD_S) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        await _until_inline(env)
        short = (await env.step({}, step_timeout=0.5)).observation  # under 1000 x the threshold
        assert short["thread"].startswith("openenv-env")
        long = (await env.step({}, step_timeout=30.0)).observation
        assert _on_loop(long)
        with pytest.raises(openenv.DeadlineExceeded):  # a slow step under a deadline: on a thread
            await env.step({"sleep": 0.5}, step_timeout=0.05)
