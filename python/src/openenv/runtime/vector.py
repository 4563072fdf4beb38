"""Vectorised sessions: one stream drives N environment instances (classic RL).

A handshake with ``num_envs = N > 1`` opens N ordinary :class:`~openenv.runtime.session.Session`
objects (N capacity slots) behind one stream. ``batch_reset`` / ``batch_step`` address them
by env id with one message each way, which amortises the per-message cost that dominates
fast environments. Each instance keeps its own state machine; the autoreset mode
(Gymnasium's ``NEXT_STEP`` / ``SAME_STEP`` / ``DISABLED``) is fixed at the handshake.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from typing import Any

from openenv.errors import EnvError, FailedPrecondition, InvalidArgument
from openenv.protocol import EpisodeStatus, SessionState, StepResult
from openenv.runtime.session import Session
from openenv.runtime.tasks import per_instance_tasks, with_task
from openenv.v1 import environment_pb2

__all__ = ["VectorSession"]

DISABLED = environment_pb2.AUTORESET_MODE_DISABLED
NEXT_STEP = environment_pb2.AUTORESET_MODE_NEXT_STEP
SAME_STEP = environment_pb2.AUTORESET_MODE_SAME_STEP


class VectorSession:
    """N sessions behind one stream, stepped together."""

    def __init__(self, sessions: list[Session], autoreset_mode: int) -> None:
        self.sessions = sessions
        self.id = sessions[0].id
        self.autoreset_mode = autoreset_mode or DISABLED
        rt = sessions[0].runtime
        # Fast sync environments run inline; threaded or async ones run concurrently.
        self._inline = not rt.run_in_thread and "step" not in rt.is_async

    @property
    def num_envs(self) -> int:
        return len(self.sessions)

    def on_terminate(self, callback: Callable[[EnvError], None]) -> None:
        for s in self.sessions:
            s.on_terminate(callback)

    async def close(self) -> None:
        """Release every instance. The releases run as one shielded batch: the transport's
        task is often cancelled right now (the client cancels its call after CloseResponse,
        or disconnects), and that must not stop the instances after the first one."""
        await asyncio.shield(asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True))

    def _ids(self, env_ids: Sequence[int]) -> list[int]:
        ids = list(env_ids) if env_ids else list(range(self.num_envs))
        bad = [i for i in ids if i >= self.num_envs]
        if bad:
            raise InvalidArgument(f"env ids {bad} out of range: this session has {self.num_envs} instances")
        if len(set(ids)) != len(ids):
            raise InvalidArgument("env ids must not repeat within one request")
        return ids

    async def _each(self, fn: Callable[[int, Any], Any], ids: list[int], args: Sequence[Any]) -> list[Any]:
        if self._inline:
            out = []
            for i, a in zip(ids, args, strict=True):
                out.append(await self._tag(fn(i, a), i))
            return out
        return await _gather_eagerly([self._tag(fn(i, a), i) for i, a in zip(ids, args, strict=True)])

    @staticmethod
    async def _tag(coro: Any, env_id: int) -> Any:
        try:
            return await coro
        except EnvError as e:
            e.message = f"env {env_id}: {e.message}"
            e.args = (e.message,)
            raise

    async def reset(
        self,
        env_ids: Sequence[int],
        seeds: Sequence[int],
        options: Mapping[str, Any] | None,
        task_ids: Sequence[str] = (),
    ) -> tuple[list[int], list[StepResult[Any]]]:
        ids = self._ids(env_ids)
        catalog = self.sessions[0].runtime.tasks
        per_options = [with_task(catalog, t, options) for t in per_instance_tasks(task_ids, len(ids))]
        if len(seeds) == 0:
            per: list[int | None] = [None] * len(ids)
        elif len(seeds) == 1:
            per = [seeds[0] + k for k in range(len(ids))]
        elif len(seeds) == len(ids):
            per = list(seeds)
        else:
            raise InvalidArgument(f"{len(seeds)} seeds for {len(ids)} instances: give 0, 1 or one per instance")
        by_id = dict(zip(ids, per_options, strict=True))
        results = await self._each(lambda i, seed: self.sessions[i].reset(seed, None, by_id[i]), ids, per)
        return ids, results

    async def step(
        self, env_ids: Sequence[int], actions: Sequence[Any], timeout: float | None
    ) -> tuple[list[int], list[StepResult[Any]], dict[int, StepResult[Any]]]:
        ids = self._ids(env_ids)
        if len(actions) != len(ids):
            raise InvalidArgument(f"{len(actions)} actions for {len(ids)} instances")
        ended = [i for i in ids if self.sessions[i].status is not EpisodeStatus.RUNNING]
        if ended and self.autoreset_mode != NEXT_STEP:
            raise FailedPrecondition(f"instances {ended} have no running episode: reset them first")
        finals: dict[int, StepResult[Any]] = {}

        async def one(i: int, action: Any) -> StepResult[Any]:
            s = self.sessions[i]
            if s.status is not EpisodeStatus.RUNNING:  # NEXT_STEP: this step is the reset
                return await s.reset(None, None, None)
            r = await s.step(action, timeout)
            if self.autoreset_mode == SAME_STEP and r.done:
                finals[i] = r
                return await s.reset(None, None, None)
            return r

        results = await self._each(one, ids, actions)
        return ids, results, finals

    async def state(self, env_id: int) -> SessionState:
        if env_id >= self.num_envs:
            raise InvalidArgument(f"env id {env_id} out of range: this session has {self.num_envs} instances")
        return await self.sessions[env_id].state()


async def _gather_eagerly(coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
    """``asyncio.gather(*coros)``, without a task for the coroutines that finish without waiting.

    Each coroutine's first step runs here, in order (as gather's tasks would run theirs, in
    its own copy of the context); one that completes (an async environment that awaits nothing,
    a sync call run inline or already answered) costs no task. The others continue as tasks,
    gathered. The outcome is gather's: the results in order, or the first exception (one
    raised in a first step comes before any task's); instances still running keep running, as
    gather's children do. What differs: ``asyncio.current_task()`` in a first step is the
    caller's task. This is the eager task start of Python 3.12 (``asyncio.eager_task_factory``),
    for one call and on 3.11.
    """
    results: list[Any] = [None] * len(coros)
    pending: list[tuple[int, asyncio.Task[Any]]] = []
    error: BaseException | None = None
    for k, coro in enumerate(coros):
        ctx = contextvars.copy_context()
        try:
            yielded = ctx.run(coro.send, None)
        except StopIteration as done:
            results[k] = done.value
        except BaseException as e:  # noqa: BLE001 - gather's outcome: the first exception
            if error is None:
                error = e
        else:
            task = asyncio.get_running_loop().create_task(_Started(coro, yielded).run(), context=ctx)
            pending.append((k, task))
    if error is not None:
        if pending:  # they go on, as gather's children would; their outcomes are retrieved
            asyncio.gather(*(t for _, t in pending), return_exceptions=True)
        raise error
    if pending:
        for (k, _), value in zip(pending, await asyncio.gather(*(t for _, t in pending)), strict=True):
            results[k] = value
    return results


class _Started:
    """The rest of a coroutine whose first step ran by hand, suspended on ``yielded`` (a future
    it awaits, or None for a bare yield): awaiting this drives it as its own task would."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self.coro, self.yielded = coro, yielded

    async def run(self) -> Any:
        return await self

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self.coro, self.yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - thrown into the task (cancellation): the coroutine's
                try:
                    yielded = coro.throw(e)
                except StopIteration as done:
                    return done.value
                continue
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value
