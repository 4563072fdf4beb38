"""Small environments written against OpenEnv's own server API (``openenv.core``).

This module is imported only inside the separate virtualenv that holds the real
OpenEnv package (``tools/openenv_upstream.py``), never in the project's venv. It is
served by OpenEnv's own server (``uvicorn upstream_envs:counter_app``) for the interop
tests and the benchmark (``tools/bench_bridge.py``):

* ``counter_app``: a trivial counter (sync ``reset``/``step``), OpenEnv's default style;
* ``async_counter_app``: the same with ``reset_async``/``step_async`` (runs on the loop);
* ``echo_app``: an MCP tool environment shaped like OpenEnv's ``echo_env``.

Capacity comes from ``MAX_CONCURRENT_ENVS`` (default 1024).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    Environment,
    create_app,
)
from openenv.core.env_server.types import Action, Observation, State

CAPACITY = int(os.environ.get("MAX_CONCURRENT_ENVS", "1024"))


class CounterAction(Action):
    delta: int = 1
    sleep: float = 0.0  # seconds the step takes (for client-side timeout tests)


def _pause(seconds: float) -> None:
    """Sleep ``seconds``; cut short once the file named by ``COUNTER_RELEASE_FILE`` exists, so a
    test can hold a step "forever" (an hour) and still let it end before the server stops."""
    release = os.environ.get("COUNTER_RELEASE_FILE")
    if not release:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


class CounterObservation(Observation):
    value: int = 0


class CounterState(State):
    value: int = 0


class CounterEnvironment(Environment):
    """Adds ``delta`` to a counter; reward = delta; done when the counter reaches ``limit``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        self._state = CounterState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, value=0)
        return CounterObservation(value=0, reward=None, done=False, metadata={"seed": seed})

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        if action.sleep:
            _pause(action.sleep)
        self._state.step_count += 1
        self._state.value += action.delta
        v = self._state.value
        return CounterObservation(
            value=v, reward=float(action.delta), done=v >= 1_000_000_000, metadata={"step": self._state.step_count}
        )

    @property
    def state(self) -> CounterState:
        return self._state


class AsyncCounterEnvironment(CounterEnvironment):
    """The counter with async overrides (OpenEnv runs these on the event loop)."""

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CounterObservation:
        return self.reset(seed=seed, episode_id=episode_id)

    async def step_async(
        self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CounterObservation:
        return self.step(action)


def _echo_env_class() -> type:
    from fastmcp import FastMCP

    from openenv.core.env_server.mcp_environment import MCPEnvironment

    class EchoEnvironment(MCPEnvironment):
        """OpenEnv's echo environment: two FastMCP tools."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            mcp = FastMCP("echo_env")

            @mcp.tool
            def echo_message(message: str) -> str:
                """Echo a message back unchanged."""
                return message

            @mcp.tool
            def echo_with_length(message: str) -> dict:
                """Echo a message back together with its length."""
                return {"message": message, "length": len(message)}

            super().__init__(mcp)
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
            return Observation(done=False, reward=0.0, metadata={"message": "Echo environment ready!"})

        def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            return Observation(done=False, reward=0.0, metadata={"error": f"unknown action {type(action).__name__}"})

        def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            self._state.step_count += 1
            return super().step(action, timeout_s=timeout_s, **kwargs)

        async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            self._state.step_count += 1
            return await super().step_async(action, timeout_s=timeout_s, **kwargs)

        @property
        def state(self) -> State:
            return self._state

    return EchoEnvironment


counter_app = create_app(
    CounterEnvironment, CounterAction, CounterObservation, env_name="counter", max_concurrent_envs=CAPACITY
)
async_counter_app = create_app(
    AsyncCounterEnvironment, CounterAction, CounterObservation, env_name="counter", max_concurrent_envs=CAPACITY
)


def __getattr__(name: str) -> Any:
    if name == "echo_app":  # built on demand: FastMCP is only needed by the MCP tests
        return create_app(
            _echo_env_class(), CallToolAction, CallToolObservation, env_name="echo_env", max_concurrent_envs=CAPACITY
        )
    raise AttributeError(name)
