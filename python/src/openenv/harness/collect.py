"""``openenv collect`` through the capture proxy: an ``openai:`` policy's calls recorded for training.

``openenv collect --policy openai:MODEL --export-training FILE`` plays its episodes as usual
(:func:`openenv.record.collect`), but the policy's model calls go through a
:class:`~openenv.harness.proxy.CaptureProxy` on loopback, one proxy URL per episode, which
forwards them to the real endpoint and records each one (asking the endpoint for token ids and
logprobs with ``request_tokens``). :class:`CollectCapture` writes what the harness runner writes,
in the same run directory format (:mod:`openenv.harness.trace`): ``calls.jsonl`` (the proxy's
rows), ``steps.jsonl`` (the episode's rows, the same as in the collect file), ``episodes.jsonl``
(its return, the environment's) and ``runs.jsonl``; so the same code turns it into RFC 0017
training traces (:func:`~openenv.harness.trace.export_training`), with the same validation: an
episode whose calls came back without token ids is refused unless text-only traces are allowed.

A resumed collection appends to the same directory: an interrupted episode's calls are kept but
belong to its session, and a replayed episode has another one, so only the calls of the session
that finished the episode are its turns.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from openenv.harness._asgi import LoopbackServer
from openenv.harness.proxy import CaptureProxy, EpisodeTags
from openenv.harness.trace import TraceWriter

__all__ = ["CollectCapture"]


def _version() -> str:
    try:
        return importlib.metadata.version("protoenv")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class CollectCapture:
    """The capture side of a collection (see the module's text): an async context manager that
    runs the proxy, and the :class:`openenv.record.collect.EpisodeHooks` that register each
    episode with it and write the run directory.

    ``upstream`` is the real endpoint's base URL (``http://host:8000/v1``); ``directory`` the run
    directory; ``run_id`` the collection's (:func:`openenv.record.run_id`), so its episode ids
    are the collect file's; ``request_tokens`` asks the endpoint for token ids and logprobs;
    ``sampling`` pins a trainer's sampling policy in every call (RFC 0017)."""

    def __init__(
        self,
        upstream: str,
        directory: str | Path,
        *,
        run_id: str,
        target: str,
        policy: str,
        model: str,
        concurrency: int = 1,
        request_tokens: bool = True,
        api_key: str | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.run_id, self.target, self.policy, self.model = run_id, target, policy, model
        self.upstream, self.concurrency, self.request_tokens = upstream, concurrency, request_tokens
        self.writer = TraceWriter(self.directory)
        self.proxy = CaptureProxy(upstream, api_key=api_key, request_tokens=request_tokens, sampling=sampling)
        self._server = LoopbackServer(self.proxy, "127.0.0.1", 0)
        self._episodes: dict[str, tuple[str, EpisodeTags, float]] = {}

    async def __aenter__(self) -> CollectCapture:
        await self._server.start()
        self.writer.add_run(
            {
                "run_id": self.run_id, "target": self.target, "agent": self.policy, "model": self.model,
                "model_url": self.upstream, "tasks": [], "concurrency": self.concurrency, "time_budget_s": None,
                "request_tokens": self.request_tokens, "started_at": time.time(), "protoenv": _version(), "jail": None,
            }
        )  # fmt: skip
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._server.stop()
        await self.proxy.aclose()

    def base_url(self, episode_id: str) -> str:
        """The proxy's base URL for the calls of a started episode (``OpenAIPolicy.route``)."""
        key, _, _ = self._episodes[episode_id]
        return f"{self._server.url}/e/{key}/v1"

    async def episode_started(self, episode_id: str, task_id: str | None, session_id: str) -> None:
        """Register the episode with the proxy: its calls are recorded under its id and session."""
        key = uuid.uuid4().hex
        tags = EpisodeTags(self.writer.add_call, self.run_id, episode_id, session_id, task_id, self.policy)
        self.proxy.register(key, tags)
        self._episodes[episode_id] = (key, tags, time.time())

    async def episode_finished(self, episode_id: str, rows: list[dict[str, Any]]) -> None:
        """Write the episode's steps and its row (return, status), once its calls are recorded."""
        key, tags, started = self._episodes.pop(episode_id)
        deadline = time.monotonic() + 60
        while tags.finished < tags.started and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # a call still being written (the policy has its answer already)
        self.proxy.unregister(key)
        self.writer.add_steps(rows)
        reward = float(sum(r.get("reward") or 0.0 for r in rows))
        terminated = bool(rows and rows[-1].get("terminated"))
        self.writer.add_episode(
            {
                "run_id": self.run_id, "episode_id": episode_id, "session_id": tags.session_id,
                "task_id": tags.task_id, "agent": self.policy, "reward": reward, "solved": terminated and reward > 0,
                "status": "finished" if terminated else "unfinished", "calls": tags.finished, "agent_exit_code": None,
                "error": None, "started_at": started, "duration_s": time.time() - started, "workspace": None,
                "log": None,
            }
        )  # fmt: skip
