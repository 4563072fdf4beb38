"""Environments cannot take the server down (RFC 0003): calls that never return hold a
thread each, yet new sessions are still admitted while threads remain, and refused at once
(UNAVAILABLE) beyond that, never left waiting; the server recovers when the calls return."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest
from openenv_testkit import WAIT_S, running, wait_until

import openenv

pytestmark = pytest.mark.anyio


class Hang(openenv.Environment):
    """A synchronous step that blocks its thread until ``release`` (a hung environment)."""

    run_in_thread = True
    max_sessions = 4
    release: ClassVar[threading.Event] = threading.Event()

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> int:
        return 0

    def step(self, action: Any) -> int:
        Hang.release.wait(120)  # bounded, so a failed test cannot leak a thread forever
        return 1


async def _hang_one(url: str) -> None:
    """Open a session, leave a step hanging past its timeout, and drop the client. Not
    resumable: a dropped resumable session keeps its slot for its grace period (RFC 0006),
    and here each dropped session must free its slot at once."""
    env = openenv.EnvClient(url, connect_timeout=WAIT_S, timeout=WAIT_S, resume=False)
    await env.connect()
    try:
        await env.reset()
        with pytest.raises(openenv.DeadlineExceeded):
            await env.step(1, timeout=0.05)
    finally:
        await env.abort()


async def test_hung_calls_never_leave_a_handshake_unanswered() -> None:
    Hang.release.clear()
    try:
        async with running(Hang) as srv:
            url = srv.address
            threads = srv.manager.max_threads
            assert threads == 2 * Hang.max_sessions + 8
            # Far more hung calls than the old fixed pool (8 threads) could take; each
            # hangs a thread and frees its session's slot.
            for _ in range(3 * Hang.max_sessions):
                await _hang_one(url)
            await wait_until(lambda: srv.manager.active == 0, what="the dropped sessions' slots")
            assert srv.manager.calls_in_threads == 3 * Hang.max_sessions
            async with openenv.EnvClient(url, connect_timeout=WAIT_S, timeout=WAIT_S) as env:
                assert (await env.reset()).observation == 0  # admitted and answered
            # Keep hanging threads until the server must refuse: it answers UNAVAILABLE.
            refused = None
            for _ in range(threads):
                try:
                    await _hang_one(url)
                except openenv.Unavailable as e:
                    refused = e
                    break
            assert refused is not None and refused.fatal and "still running" in refused.message
            assert srv.manager.calls_in_threads < threads
            Hang.release.set()  # the environment comes back: so does admission
            await wait_until(lambda: srv.manager.calls_in_threads == 0, timeout=60, what="the hung calls to return")
            async with openenv.EnvClient(url, timeout=WAIT_S) as env:
                await env.reset()
                assert (await env.step(1)).observation == 1
    finally:
        Hang.release.set()
