"""``Recorder``: wrap a client, play as usual, get every time step recorded.

::

    async with Recorder(EnvClient(url), "runs.jsonl") as env:
        r = await env.reset(seed=1)
        while not r.done:
            r = await env.step(policy(r.observation))

Each reset starts an episode; its rows are written when it ends (or when the next reset or
``close`` abandons it, then marked ``final`` at its last step). The file format is
:mod:`openenv.record.rows`'; ``openenv collect`` writes the same.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openenv.client import EnvClient
from openenv.protocol import StepResult
from openenv.record.rows import dumps
from openenv.record.store import RecordStore

__all__ = ["EpisodeLog", "Recorder"]


class EpisodeLog:
    """The rows of one episode, built step by step."""

    def __init__(self, index: int, seed: int | None, task_id: str | None, policy: str) -> None:
        self.index, self.seed, self.task_id, self.policy = index, seed, task_id, policy
        self.rows: list[dict[str, Any]] = []
        self.episode_id = ""

    def add(self, r: StepResult[Any], action: Any, started: float, duration: float, has_action: bool) -> None:
        if not self.rows:
            self.episode_id = r.episode_id
        self.rows.append(
            {
                "episode_id": self.episode_id,
                "episode_index": self.index,
                "seed": self.seed,
                "task_id": self.task_id,
                "step": r.step_count,
                "observation": dumps(r.observation),
                "action": dumps(action) if has_action else None,
                "reward": r.reward,
                "reward_breakdown": dumps(r.reward_breakdown.to_dict()) if r.reward_breakdown is not None else None,
                "terminated": r.terminated,
                "truncated": r.truncated,
                "final": False,
                "metadata": dumps(r.metadata or {}),
                "timestamp": started,
                "duration_s": duration,
                "policy": self.policy,
            }
        )

    def finish(self) -> list[dict[str, Any]]:
        if self.rows:
            self.rows[-1]["final"] = True
        return self.rows

    @property
    def total_reward(self) -> float:
        return float(sum(r["reward"] or 0.0 for r in self.rows))


class Recorder:
    """An :class:`openenv.EnvClient` (async) whose resets and steps are recorded to ``out``
    (``.jsonl`` or ``.parquet``). Other attributes are the client's."""

    def __init__(self, client: EnvClient, out: str | Path, *, policy: str = "") -> None:
        self.client = client
        self.store = RecordStore(out).open()
        self.policy = policy
        self._episode: EpisodeLog | None = None
        self._count = len({*self.store.finished})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> Recorder:
        await self.client.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _end(self) -> None:
        if self._episode is not None and self._episode.rows:
            self.store.add_episode(self._episode.finish())
            self.store.flush()
        self._episode = None

    async def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> StepResult[Any]:
        self._end()
        started, t0 = time.time(), time.perf_counter()
        r = await self.client.reset(seed, episode_id, options, **kwargs)
        self._episode = EpisodeLog(self._count, seed, kwargs.get("task_id"), self.policy)
        self._count += 1
        self._episode.add(r, None, started, time.perf_counter() - t0, has_action=False)
        return r

    async def step(self, action: Any, **kwargs: Any) -> StepResult[Any]:
        started, t0 = time.time(), time.perf_counter()
        r = await self.client.step(action, **kwargs)
        if self._episode is not None:
            self._episode.add(r, action, started, time.perf_counter() - t0, has_action=True)
            if r.done:
                self._end()
        return r

    async def close(self) -> None:
        self._end()
        await self.client.close()
