"""The blocking view of a client: ``EnvClient(...).sync()``, for scripts and notebooks."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from openenv.client.connection import Connection
from openenv.client.results import BatchResult
from openenv.errors import FailedPrecondition
from openenv.protocol import SessionState, StepResult
from openenv.runtime.tasks import TaskInfo
from openenv.runtime.tools import Tool, ToolResult
from openenv.v1 import environment_pb2, multiagent_pb2, rubric_pb2

__all__ = ["AsyncEnvClient", "SyncEnvClient"]

_T = TypeVar("_T")


class AsyncEnvClient(Protocol):
    """What the blocking view drives: an :class:`~openenv.EnvClient` or a
    :class:`~openenv.VectorEnvClient` (any ``BaseEnvClient``). Declared here so that this module
    needs nothing of the client's (the client's ``sync()`` builds the view; the view never
    reaches back). Methods a kind may lack (``reset``, ``step_batch``, ...) are looked up by
    name."""

    @property
    def connection(self) -> Connection | None: ...

    @property
    def info(self) -> environment_pb2.EnvironmentInfo | None: ...

    @property
    def rubric(self) -> rubric_pb2.RubricSpec | None: ...

    @property
    def task_splits(self) -> dict[str, int]: ...

    async def connect(self) -> Any: ...

    async def close(self) -> None: ...

    async def abort(self) -> None: ...

    async def state(self, *, env_id: int = 0, timeout: float | None = None) -> SessionState: ...

    async def list_tasks(
        self, split: str | None = None, *, limit: int | None = None, timeout: float | None = None
    ) -> list[TaskInfo]: ...


class SyncEnvClient:
    """Blocking wrapper around an :class:`EnvClient` or a :class:`VectorEnvClient`; its event
    loop runs in a private thread, so it also works where a loop is already running (Jupyter).
    A method the wrapped client does not have (``reset`` of a vectorised session) raises
    ``FailedPrecondition``."""

    def __init__(self, client: AsyncEnvClient, *, portal: BlockingPortal | None = None) -> None:
        """``portal``: an anyio blocking portal of your own whose loop runs the client (its
        owner closes it, after this client); without it, connecting starts a private one."""
        self.client = client
        self._cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = portal

    def __enter__(self) -> SyncEnvClient:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connect(self) -> SyncEnvClient:
        if self._portal is None:
            self._cm = cm = start_blocking_portal("asyncio")
            self._portal = portal = cm.__enter__()
            try:
                portal.call(self.client.connect)
            except BaseException:
                cm.__exit__(None, None, None)
                self._portal = self._cm = None
                raise
        elif self.client.connection is None:  # a given portal (a fork's is its parent's: connected)
            self._portal.call(self.client.connect)
        return self

    def close(self) -> None:
        if self._portal is not None and self._cm is None:  # a borrowed loop (a fork's, a given portal)
            try:
                self._portal.call(self.client.close)
            finally:
                self._portal = None
        if self._portal is not None and self._cm is not None:  # set together by connect()
            try:
                self._portal.call(self.client.close)
            finally:
                self._cm.__exit__(None, None, None)
                self._portal = self._cm = None

    def _method(self, name: str) -> Callable[..., Awaitable[Any]]:
        """The wrapped client's ``name`` method, or ``FailedPrecondition`` when its kind has
        none (a :class:`VectorEnvClient` has no ``reset``; an :class:`EnvClient`'s batches
        need ``num_envs > 1``, which the server checks)."""
        fn: Callable[..., Awaitable[Any]] | None = getattr(self.client, name, None)
        if fn is None:
            raise FailedPrecondition(
                f"{type(self.client).__name__} has no {name}(): a vectorised session resets and steps with "
                "reset_batch() and step_batch(), one instance with reset() and step()"
            )
        return fn

    def _run(self, fn: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any) -> _T:
        if self._portal is None:
            raise FailedPrecondition("not connected: use `with client.sync() as env:` or call connect()")
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    @property
    def info(self) -> environment_pb2.EnvironmentInfo | None:
        return self.client.info

    @property
    def rubric(self) -> rubric_pb2.RubricSpec | None:
        return self.client.rubric

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> StepResult[Any]:
        out: StepResult[Any] = self._run(self._method("reset"), seed, episode_id, options, **kw)
        return out

    @property
    def task_splits(self) -> dict[str, int]:
        return self.client.task_splits

    def list_tasks(self, split: str | None = None, **kw: Any) -> list[TaskInfo]:
        return self._run(self.client.list_tasks, split, **kw)

    def step(self, action: Any, **kw: Any) -> StepResult[Any]:
        out: StepResult[Any] = self._run(self._method("step"), action, **kw)
        return out

    def state(self, **kw: Any) -> SessionState:
        return self._run(self.client.state, **kw)

    def step_agents(self, actions: Mapping[str, Any], **kw: Any) -> StepResult[Any]:
        """Multi-agent, simultaneous worlds (RFC 0012): :meth:`EnvClient.step_agents`."""
        out: StepResult[Any] = self._run(self._method("step_agents"), actions, **kw)
        return out

    def observe(self, **kw: Any) -> StepResult[Any]:
        """Multi-agent worlds (RFC 0012): :meth:`EnvClient.observe`."""
        out: StepResult[Any] = self._run(self._method("observe"), **kw)
        return out

    @property
    def world(self) -> multiagent_pb2.WorldInfo:
        """The world of a multi-agent session (RFC 0012): :attr:`EnvClient.world`."""
        world: multiagent_pb2.WorldInfo = getattr(self.client, "world", multiagent_pb2.WorldInfo())
        return world

    @property
    def multi_agent(self) -> multiagent_pb2.MultiAgentSpec | None:
        """:attr:`EnvClient.multi_agent`."""
        spec: multiagent_pb2.MultiAgentSpec | None = getattr(self.client, "multi_agent", None)
        return spec

    def list_tools(self, **kw: Any) -> list[Tool]:
        out: list[Tool] = self._run(self._method("list_tools"), **kw)
        return out

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, **kw: Any) -> ToolResult:
        out: ToolResult = self._run(self._method("call_tool"), name, arguments, **kw)
        return out

    def reset_batch(self, env_ids: Sequence[int] = (), seeds: Sequence[int] = (), **kw: Any) -> BatchResult:
        out: BatchResult = self._run(self._method("reset_batch"), env_ids, seeds, **kw)
        return out

    def step_batch(self, actions: Sequence[Any], env_ids: Sequence[int] = (), **kw: Any) -> BatchResult:
        out: BatchResult = self._run(self._method("step_batch"), actions, env_ids, **kw)
        return out

    def snapshot(self, **kw: Any) -> environment_pb2.Snapshot:
        """See :meth:`EnvClient.snapshot`."""
        out: environment_pb2.Snapshot = self._run(self._method("snapshot"), **kw)
        return out

    def restore(self, snapshot: environment_pb2.Snapshot, **kw: Any) -> SessionState:
        """See :meth:`EnvClient.restore`."""
        out: SessionState = self._run(self._method("restore"), snapshot, **kw)
        return out

    def fork(self, n: int = 1, **kw: Any) -> list[SyncEnvClient]:
        """See :meth:`EnvClient.fork`. The forks run on this client's event loop: close them
        before this one."""
        out = []
        for c in self._run(self._method("fork"), n, **kw):
            f = SyncEnvClient(c)
            f._portal = self._portal
            out.append(f)
        return out

    def abort(self) -> None:
        """Drop the connection without a close request (see :meth:`EnvClient.abort`)."""
        if self._portal is not None and self._cm is not None:  # set together by connect()
            try:
                self._portal.call(self.client.abort)
            finally:
                self._cm.__exit__(None, None, None)
                self._portal = self._cm = None
