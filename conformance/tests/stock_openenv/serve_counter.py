"""A small environment written against OpenEnv's own server API, served by OpenEnv's stack.

Runs inside the separate virtualenv holding the real OpenEnv release
(``tools/openenv_upstream.py``), never in the project's venv: ``python serve_counter.py
READY_FILE``. Binds 127.0.0.1 port 0, writes ``http://127.0.0.1:PORT`` to READY_FILE and
serves until SIGTERM. The conformance tests certify it as a stock OpenEnv target: a counter
whose action is ``{"delta": -3..3}``; the episode ends when |value| reaches 6.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from typing import Any

import uvicorn
from pydantic import Field

from openenv.core.env_server import Environment, create_app
from openenv.core.env_server.types import Action, Observation, State


class StepAction(Action):
    delta: int = Field(default=1, ge=-3, le=3)


class CounterObservation(Observation):
    value: int = 0


class CounterState(State):
    value: int = 0


class Counter(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        self._state = CounterState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, value=0)
        return CounterObservation(value=0, reward=None, done=False)

    def step(self, action: StepAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        self._state.step_count += 1
        self._state.value += action.delta
        v = self._state.value
        return CounterObservation(value=v, reward=float(action.delta), done=abs(v) >= 6)

    @property
    def state(self) -> CounterState:
        return self._state


app = create_app(Counter, StepAction, CounterObservation, env_name="stock_counter", max_concurrent_envs=8)


def main(ready_file: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"http://127.0.0.1:{sock.getsockname()[1]}")
    os.replace(tmp, ready_file)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1])
