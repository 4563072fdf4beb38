"""Shared fixtures of the runtime's tests (python/tests).

Async tests run under anyio's pytest plugin on the asyncio backend (grpc.aio does not
run under trio). Helpers live in ``openenv_testkit`` and test environments in
``openenv_testenvs``; this file puts their directory on ``sys.path``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import openenv_testenvs  # noqa: E402


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """grpc.aio needs asyncio."""
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
async def _one_event_loop(anyio_backend: str) -> AsyncIterator[None]:
    """Every async test of the session runs on one event loop (anyio keeps its runner while
    a fixture holds it). grpc.aio completes operations on the loop that started them; with a
    loop per test, a completion still owed to the previous test's closed loop would surface in
    the next test as "Event loop is closed" (anyio re-raises loop errors). The runtime itself
    leaves nothing owed (tests/test_event_loops.py); raw calls in tests may."""
    yield


@pytest.fixture(autouse=True)
def _fresh_counts() -> Iterator[None]:
    """Every test starts with zeroed created/closed counters and closed gates."""
    for cls in vars(openenv_testenvs).values():
        if isinstance(cls, type) and issubclass(cls, openenv_testenvs.Tracked):
            cls.reset_counts()
    openenv_testenvs.Scripted.gate.clear()
    openenv_testenvs.Scripted.entered.clear()
    openenv_testenvs.Sleeper.release.clear()
    openenv_testenvs.AsyncSlow.cancelled = 0
    openenv_testenvs.Scripted.overlaps = 0
    openenv_testenvs.Sleeper.in_step = 0
    yield
    openenv_testenvs.Scripted.gate.set()  # never leave a worker thread waiting
    openenv_testenvs.Sleeper.release.set()
