"""Servers whose event loop is starved on purpose, for ``test_starved_server.py``.

``openenv serve openenv_starved_envs:LoopBlocker`` from this directory: a step of
``{"mark": path, "release": path}`` writes ``mark`` and then blocks the server's event loop
(a stand-in for a process that gets no CPU) until ``release`` exists, at most ``CAP_S``.

``python openenv_starved_envs.py PORTS_FILE HEAD_TIMEOUT_S MARK RELEASE``: ``Counter`` served
with that request-head deadline on the HTTP listener and on a binary listener, and a plain TCP
listener on the same event loop whose first received bytes block that loop (writing ``MARK``,
then until ``RELEASE`` exists): the block happens while the loop reads its sockets, as when a
connect burst keeps it reading for longer than the deadline. The three ports are written to
``PORTS_FILE`` (JSON) once all listen.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openenv

CAP_S = 300.0  # a hang guard: the test releases the loop long before


class LoopBlocker(openenv.Environment):
    """Resets to 0; a step with ``mark`` and ``release`` paths blocks the event loop (above)."""

    max_sessions = 64
    run_in_thread = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> int:
        return 0

    async def step(self, action: Any) -> openenv.StepResult:  # async: it runs on the loop
        Path(action["mark"]).write_text(str(os.getpid()))
        until = time.monotonic() + CAP_S
        while not Path(action["release"]).exists() and time.monotonic() < until:
            time.sleep(0.05)  # blocks the loop: no await
        return openenv.StepResult(1, reward=0.0)


class _Blocker(asyncio.Protocol):
    def __init__(self, mark: str, release: str) -> None:
        self.mark, self.release = mark, release

    def data_received(self, data: bytes) -> None:  # called while the loop polls its sockets
        Path(self.mark).write_text(str(os.getpid()))
        until = time.monotonic() + CAP_S
        while not Path(self.release).exists() and time.monotonic() < until:
            time.sleep(0.05)  # blocks the loop


def _serve_with_head_timeout(ports_file: str, head_timeout_s: float, mark: str, release: str) -> None:
    from openenv_testenvs import Counter

    limits = openenv.HttpLimits(head_timeout_s=head_timeout_s)
    settings = openenv.ServerSettings(http=openenv.HttpSettings(limits=limits))

    async def publish(host: openenv.Host) -> None:
        blocker = await asyncio.get_running_loop().create_server(lambda: _Blocker(mark, release), "127.0.0.1", 0)
        ports = {"http": host.http.port, "binary": host.binary.port, "blocker": blocker.sockets[0].getsockname()[1]}
        tmp = ports_file + ".tmp"
        Path(tmp).write_text(json.dumps(ports))
        os.replace(tmp, ports_file)

    tasks: list[asyncio.Task[None]] = []

    def ready(host: openenv.Host) -> None:
        tasks.append(asyncio.ensure_future(publish(host)))

    openenv.serve(Counter, "127.0.0.1", 0, http_port=0, binary_port=0, settings=settings, ready=ready)


if __name__ == "__main__":
    _serve_with_head_timeout(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4])
