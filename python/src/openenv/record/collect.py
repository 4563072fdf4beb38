"""Rollout collection: N episodes, K sessions at once, recorded to JSONL or Parquet.

Episode ``i`` of a run with seed ``S`` is reset with seed ``S + i`` and episode id
``{run}-{i:06d}`` (``run`` derived from the seed, the policy and the target), so a rerun with
the same arguments knows which episodes the file already holds and skips them: an
interrupted collection resumes where it stopped. A file holding episodes of another run
(another seed, policy or target) is refused unless ``append=True`` (``--append``): one run
must not be mixed into another's file by a changed flag. With ``split``, episode ``i`` plays
task ``i mod n`` of that split (RFC 0004).

``hooks`` (:class:`EpisodeHooks`) are told when each episode starts and ends: what
``openenv collect --export-training`` uses to route an ``openai:`` policy's model calls through
the harness's capture proxy (:class:`openenv.harness.CollectCapture`) and write the episodes'
training traces.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from openenv.client import EnvClient, ToolEnvClient
from openenv.record.policies import STOP, PolicyContext
from openenv.record.recorder import EpisodeLog
from openenv.record.store import RecordStore, read_rows

__all__ = ["CollectStats", "EpisodeHooks", "OtherRunError", "collect", "run_id"]


class OtherRunError(ValueError):
    """The output file holds episodes of another run, and adding to it was not asked for."""


class EpisodeHooks(Protocol):
    """Told about each episode of a collection, in its worker's task: started after its reset
    (before the policy's first call), finished once its rows are in the output file."""

    async def episode_started(self, episode_id: str, task_id: str | None, session_id: str) -> None: ...

    async def episode_finished(self, episode_id: str, rows: list[dict[str, Any]]) -> None: ...


@dataclasses.dataclass
class CollectStats:
    """What a run did: episodes played now and skipped (already in the file), steps, rewards."""

    episodes: int = 0
    skipped: int = 0
    steps: int = 0
    returns: list[float] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")


def run_id(target: str, policy: str, seed: int) -> str:
    """A short, stable id of (target, policy, seed): the prefix of the run's episode ids."""
    return hashlib.sha1(f"{target}|{policy}|{seed}".encode()).hexdigest()[:8]


TOOL_ACTION = "openenv.v1.CallToolRequest"


def _client(cls: type[EnvClient], target: str, **kwargs: Any) -> EnvClient:
    if target.startswith("docker:"):
        out: EnvClient = cls.from_docker_image(target.removeprefix("docker:"), **kwargs)
        return out
    return cls(target, **kwargs)


async def _client_class(target: str, **kwargs: Any) -> type[EnvClient]:
    """:class:`ToolEnvClient` for a tool-shaped environment (tool calls as actions), else
    :class:`EnvClient` (a probe session reads the advertised action type)."""
    if target.startswith("docker:"):
        return ToolEnvClient  # an image is started once per session: do not start one just to look
    async with EnvClient(target, **kwargs) as probe:
        assert probe.info is not None
        return ToolEnvClient if probe.info.action.message_type == TOOL_ACTION else EnvClient


async def _call(policy: Callable[..., Any], observation: Any, ctx: PolicyContext) -> Any:
    out = policy(observation, ctx)
    if inspect.isawaitable(out):
        out = await out
    return out


async def collect(
    target: str,
    policy: Callable[..., Any],
    out: str | Path,
    *,
    episodes: int,
    concurrency: int = 1,
    seed: int = 0,
    max_steps: int | None = None,
    split: str | None = None,
    policy_name: str | None = None,
    progress: bool = True,
    client_kwargs: dict[str, Any] | None = None,
    append: bool = False,
    hooks: EpisodeHooks | None = None,
) -> CollectStats:
    """Play ``episodes`` episodes of the environment at ``target`` with ``policy`` on
    ``concurrency`` sessions and record them to ``out``; returns the run's stats.

    Raises:
        OtherRunError: ``out`` holds episodes of another run and ``append`` is false (the file
        is left as it was).
    """
    if episodes < 1 or concurrency < 1:
        raise ValueError("episodes and concurrency must be >= 1")
    name = str(policy_name or getattr(policy, "name", None) or getattr(policy, "__name__", type(policy).__name__))
    run = run_id(target, name, seed)
    if not append:
        _refuse_other_runs(Path(out), run)
    store = RecordStore(out).open()
    ids = [f"{run}-{i:06d}" for i in range(episodes)]
    todo = [i for i in range(episodes) if ids[i] not in store.finished]
    stats = CollectStats(skipped=episodes - len(todo))
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in todo:
        queue.put_nowait(i)
    bar = _progress(progress, episodes, stats.skipped)
    started = time.perf_counter()
    kwargs = dict(client_kwargs or {})
    cls = await _client_class(target, **kwargs) if todo else EnvClient

    async def worker() -> None:
        async with _client(cls, target, **kwargs) as env:
            info = env.info
            assert info is not None
            tools = await env.list_tools() if info.capabilities.tools else []
            tasks = await env.list_tasks(split) if split is not None else []
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                task_id = tasks[i % len(tasks)].id if tasks else None
                log = EpisodeLog(i, seed + i, task_id, name)
                t0, p0 = time.time(), time.perf_counter()
                r = await env.reset(seed + i, ids[i], task_id=task_id)
                log.add(r, None, t0, time.perf_counter() - p0, has_action=False)
                if hooks is not None:
                    await hooks.episode_started(ids[i], task_id, env.session_id)
                ctx = PolicyContext(info, tools, ids[i], i, 0, random.Random(f"{seed}-{i}"))
                while not r.done and (max_steps is None or r.step_count < max_steps):
                    ctx.step = r.step_count
                    action = await _call(policy, r.observation, ctx)
                    if action is STOP:
                        break
                    t0, p0 = time.time(), time.perf_counter()
                    r = await env.step(action)
                    log.add(r, action, t0, time.perf_counter() - p0, has_action=True)
                    stats.steps += 1
                rows = log.finish()
                store.add_episode(rows)
                store.flush()
                if hooks is not None:
                    await hooks.episode_finished(ids[i], rows)
                stats.episodes += 1
                stats.returns.append(log.total_reward)
                if bar is not None:
                    elapsed = max(time.perf_counter() - started, 1e-9)
                    bar.set_postfix(
                        {"steps/s": f"{stats.steps / elapsed:.1f}", "mean_reward": f"{stats.mean_return:.3f}"},
                        refresh=False,
                    )
                    bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(len(todo), 1)))))
    finally:
        store.flush()
        if bar is not None:
            bar.close()
    stats.seconds = time.perf_counter() - started
    return stats


def _refuse_other_runs(out: Path, run: str) -> None:
    others = [r for r in read_rows(out) if not str(r.get("episode_id") or "").startswith(f"{run}-")]
    if not others:
        return
    episodes = len({r["episode_id"] for r in others})
    policies = sorted({str(r.get("policy")) for r in others})
    first_seed = min((r["seed"] for r in others if r.get("step") == 0 and r.get("seed") is not None), default=None)
    raise OtherRunError(
        f"{out} already holds {episodes} episode(s) of another run (policy {', '.join(policies)}"
        + ("" if first_seed is None else f", seeds from {first_seed}")
        + "): pass --append to add this run to the same file, or choose another --out (the file is unchanged)"
    )


def _progress(enabled: bool, total: int, done: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm  # the collect extra

    return tqdm(total=total, initial=done, unit="episode", desc="episodes", mininterval=0.5)
