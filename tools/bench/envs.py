"""Trivial environments for benchmarks: the transport is what is measured.

``SyncEcho``/``AsyncEcho`` echo a JSON action ``{"x": n}`` back as the observation with
reward 1.0 (sync runs in the worker thread like any blocking environment; async on the
loop). ``BigObs`` returns a 64 KiB string observation; ``Image`` a 1 MiB uint8 tensor.
``ToolEcho`` is a tool environment (one ``echo_message`` tool). The counter environments
compared with stock OpenEnv live in ``python/tests/bridge/bridge_envs.py`` (ours) and
``upstream_envs.py`` (the same environment written against OpenEnv's API).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import numpy as np

import openenv


class SyncEcho(openenv.Environment):
    """Echoes the action; sync methods (run off the event loop, in a worker thread)."""

    max_sessions = 4096
    deterministic = True

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return {"x": 0}

    def step(self, action: Any) -> openenv.StepResult:
        return openenv.StepResult(action, reward=1.0)


class AsyncEcho(openenv.Environment):
    """Echoes the action; async methods (run on the event loop)."""

    max_sessions = 4096
    deterministic = True

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return {"x": 0}

    async def step(self, action: Any) -> openenv.StepResult:
        return openenv.StepResult(action, reward=1.0)


class BigObs(AsyncEcho):
    """Observation of 64 KiB of text."""

    blob = "x" * 65536

    async def step(self, action: Any) -> openenv.StepResult:
        return openenv.StepResult({"text": self.blob}, reward=1.0)


class Image(AsyncEcho):
    """Observation: a 1 MiB uint8 image tensor (512x512x4)."""

    observation_type = openenv.TensorSpec("uint8", (512, 512, 4))
    frame = np.random.default_rng(0).integers(0, 255, (512, 512, 4), dtype=np.uint8)

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> np.ndarray:
        return self.frame

    async def step(self, action: Any) -> openenv.StepResult:
        return openenv.StepResult(self.frame, reward=1.0)


class ToolEcho(openenv.Environment):
    """A tool environment: steps are ``CallToolAction("echo", {"message": ...})``."""

    max_sessions = 4096
    run_in_thread = False

    @openenv.tool
    def echo_message(self, message: str) -> str:
        """Echo the message (named as in OpenEnv's echo_env, whose MCP step path is compared)."""
        return message


class WaitStep(AsyncEcho):
    """OpenEnv's scaling benchmark environment: each step awaits a fixed delay
    (``$BENCH_WAIT_S`` seconds, default 1.0) and echoes the action; the server's cost per
    session, not the environment's work, is what the delay leaves to measure."""

    max_sessions = 16384

    async def step(self, action: Any) -> openenv.StepResult:
        await asyncio.sleep(_WAIT_S)
        return openenv.StepResult(action, reward=1.0)


_WAIT_S = float(os.environ.get("BENCH_WAIT_S", "1.0"))
