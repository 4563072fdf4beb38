"""Shared fixtures of the runtime's tests (python/tests).

Async tests run under anyio's pytest plugin on the asyncio backend (grpc.aio does not
run under trio). Helpers live in ``openenv_testkit`` and test environments in
``openenv_testenvs``; this file puts their directory on ``sys.path``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import openenv_testenvs  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    """grpc.aio needs asyncio."""
    return "asyncio"


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
