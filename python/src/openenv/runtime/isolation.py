"""Process isolation (``--isolation process``, RFC 0003): each session's environment runs in a
worker process of its own, so ``os._exit``, a segfault in native code or a memory blow-up
loses only that session.

:class:`ProcessEnv` stands in for the environment instance in the server: its methods send
the call over a pipe to the worker and wait for the answer (on the session's thread). When
the worker dies, the call raises :class:`~openenv.errors.Unavailable` (fatal): the client is
told its session is gone, the session's slot is freed, the server keeps serving. Workers
start with ``spawn`` (never ``fork``: the server holds gRPC's threads), so the factory must be
importable by reference (a module-level class or function), and actions, observations and
tool results must pickle.

An environment's rubric runs in the worker too, beside the instance it reads (``rubric.env``):
the session's :class:`WorkerRubric` forwards reset, scoring, snapshot state and close to it,
so rewards, reward breakdowns, trajectory credits and snapshots are those of thread mode.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from openenv.errors import Internal, Unavailable
from openenv.runtime.limits import ISOLATION_MODES  # declared with the other limits
from openenv.runtime.rubrics import Rubric
from openenv.runtime.snapshots import restore_rubric, rubric_state

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["ISOLATION_MODES", "ProcessEnv", "WorkerRubric"]

"""``thread``: environments run in the server process (the default); ``process``: one
worker process per session."""

_STOP_GRACE_S = 5.0


def _answer(loop: asyncio.AbstractEventLoop, value: Any) -> Any:
    return loop.run_until_complete(value) if inspect.isawaitable(value) else value


def _worker(conn: Connection, factory: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """The worker process: build the environment, then answer calls until ``close``."""
    loop = asyncio.new_event_loop()
    try:
        env = factory(**options)
    except BaseException as e:  # noqa: BLE001 - reported to the server
        _send(conn, "err", e)
        return
    _send(conn, "ok", None)
    tools = type(env).tools()
    rubric = _bound_rubric(env)
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        try:
            if op == "tool":
                name, kwargs = args
                value = _answer(loop, tools[name].fn(env, **kwargs))
            elif op == "reset":
                value = _answer(loop, env.reset(**args))
            elif op.startswith("rubric_"):
                value = _rubric_op(loop, rubric, type(env), op, args)
            else:
                value = _answer(loop, getattr(env, op)(*args))
        except BaseException as e:  # noqa: BLE001 - reported to the server
            _send(conn, "err", e)
        else:
            _send(conn, "ok", value)
        if op == "close":
            if rubric is not None:
                try:
                    loop.run_until_complete(asyncio.wait_for(rubric.aclose(), _STOP_GRACE_S))
                except BaseException:  # noqa: BLE001 - the worker ends anyway
                    pass
            return


def _bound_rubric(env: Any) -> Any:
    """The worker's rubric for ``env``: its own, or the class's cloned, bound to it (as the
    server does in thread mode); None without one."""
    own = env.__dict__.get("rubric")
    rubric = own if isinstance(own, Rubric) else getattr(type(env), "rubric", None)
    if not isinstance(rubric, Rubric):
        return None
    if rubric is not own:
        rubric = rubric.clone()
    rubric.bind(env)
    env.rubric = rubric
    return rubric


def _rubric_op(loop: asyncio.AbstractEventLoop, rubric: Any, env_cls: type, op: str, args: Any) -> Any:
    if rubric is None:
        raise Internal("the environment has no rubric in its worker")
    if op == "rubric_reset":
        return rubric.reset()
    if op == "rubric_score":
        action, observation, done = args
        if rubric.is_async:
            return loop.run_until_complete(rubric.evaluate(action, observation, done=done))
        return rubric.evaluate_sync(action, observation, done=done)
    if op == "rubric_state":
        return rubric_state(rubric, env_cls)
    if op == "rubric_restore":
        data, check_only = args
        return restore_rubric(rubric, data, env_cls, check_only=check_only)
    raise Internal(f"unknown rubric operation {op!r}")


def _send(conn: Connection, kind: str, value: Any) -> None:
    try:
        conn.send((kind, value))
    except Exception as e:  # noqa: BLE001 - an answer that does not pickle
        if kind == "err":
            conn.send(("err", Internal(f"{type(value).__name__}: {value}")))
        else:
            conn.send(("err", Internal(f"the environment's answer cannot cross processes: {type(e).__name__}: {e}")))


class ProcessEnv:
    """One environment instance in its own worker process (see the module's text).

    Constructing it starts the worker and builds the environment there (raising what the
    factory raised); :meth:`close` closes it and ends the worker.
    """

    def __init__(self, factory: Callable[..., Any], options: Mapping[str, Any]) -> None:
        import multiprocessing  # here: servers without process isolation never need it

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker, args=(child, factory, dict(options)), daemon=True)
        self._proc.start()
        child.close()
        self._lock = threading.Lock()
        self._call(None, ())  # the factory's outcome

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._proc.pid

    def _call(self, op: str | None, args: Any) -> Any:
        with self._lock:
            try:
                if op is not None:
                    self._conn.send((op, args))
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self._proc.join(_STOP_GRACE_S)
                code = self._proc.exitcode
                raise Unavailable(
                    f"the environment's worker process died (exit code {code}); this session is lost", fatal=True
                ) from None
        if kind == "err":
            raise value
        return value

    def reset(self, **kwargs: Any) -> Any:
        return self._call("reset", kwargs)

    def step(self, action: Any) -> Any:
        return self._call("step", (action,))

    def state(self) -> Any:
        return self._call("state", ())

    def finish_tool_step(self, action: Any, observation: Any) -> Any:
        return self._call("finish_tool_step", (action, observation))

    def call_tool(self, name: str, kwargs: Mapping[str, Any]) -> Any:
        return self._call("tool", (name, dict(kwargs)))

    def render(self) -> Any:
        return self._call("render", ())

    def snapshot(self) -> Any:
        return self._call("snapshot", ())

    def restore(self, data: bytes) -> Any:
        return self._call("restore", (data,))

    def close(self) -> None:
        try:
            if self._proc.is_alive():
                self._call("close", ())
        except Unavailable:
            pass
        finally:
            self._conn.close()
            self._proc.join(_STOP_GRACE_S)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(_STOP_GRACE_S)


class WorkerRubric:
    """The server's handle on a session's rubric living in its :class:`ProcessEnv` worker:
    what the session calls on a rubric (reset, scoring, snapshot state, close), forwarded.
    Scoring is synchronous here (an async rubric runs on the worker's own loop)."""

    is_async = False

    def __init__(self, env: ProcessEnv, name: str) -> None:
        self.env = env
        self.name = name

    def reset(self) -> None:
        self.env._call("rubric_reset", ())

    def evaluate_sync(self, action: Any, observation: Any, *, done: bool = False) -> Any:
        return self.env._call("rubric_score", (action, observation, done))

    def state(self) -> bytes:
        """The rubric's per-episode state (:func:`~openenv.runtime.snapshots.rubric_state`)."""
        data: bytes = self.env._call("rubric_state", ())
        return data

    def restore(self, data: bytes, *, check_only: bool = False) -> None:
        """Put back the rubric's state (:func:`~openenv.runtime.snapshots.restore_rubric`, in the
        worker); ``check_only``: only check that it would be put back."""
        self.env._call("rubric_restore", (data, check_only))

    async def aclose(self) -> None:
        """Nothing here: the worker closes its rubric when its environment is closed."""
