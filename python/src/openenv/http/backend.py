"""What the bridge translates onto: sessions that speak canonical JSON.

A :class:`Backend` opens :class:`BackendSession`\\ s. Two implementations exist:

* :class:`LocalBackend` (this module): the in-process ``SessionManager`` of a server, the
  same one its gRPC side uses (same capacity, same idle reaper, no extra hop);
* the bridge's remote backend (:mod:`openenv.bridge.remote`): a remote gRPC environment server in any
  language, one gRPC ``Session`` stream per bridged session.

Both take actions as canonical JSON (:mod:`openenv.json_protocol.payloads`), return
:class:`~openenv.json_protocol.frames.JsonStep`\\ s and raise the exceptions of the error table.
"""

from __future__ import annotations

import abc
import asyncio
import functools
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from google.protobuf import json_format

from openenv.engine import Engine, Stream
from openenv.errors import EnvError, Internal, InvalidArgument, Unimplemented
from openenv.http.limits import bounded_loads
from openenv.json_protocol import frames
from openenv.json_protocol.frames import JsonStep
from openenv.json_protocol.jsontext import dumps
from openenv.json_protocol.payloads import CALL_TOOL, PayloadJson, message_to_json
from openenv.json_protocol.render import render_to_json
from openenv.protocol import EpisodeStatus, SessionState, StepResult
from openenv.runtime.codec import AdaptedCodec, Codec, MessageCodec, TensorCodec
from openenv.runtime.load import server_load
from openenv.runtime.session import Session, SessionManager
from openenv.runtime.tools import CallToolAction, Tool, ToolResult
from openenv.v1 import environment_pb2, load_pb2, payload_pb2

__all__ = ["Backend", "BackendSession", "LocalBackend", "LocalSession", "SessionServer", "call_tool_args", "spawn"]

_PLAIN = (dict, list, str, int, float, bool, type(None))
_T = TypeVar("_T")


def call_tool_args(data: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of OpenEnv's ``{"type": "call_tool", "tool_name", "arguments"}``
    (arguments may arrive as a JSON string, as OpenEnv accepts; read within the bridge's bounds)."""
    return frames.call_tool_args(data, bounded_loads)


class BackendSession(abc.ABC):
    """One environment session. Calls never overlap (the transport serialises them)."""

    id: str
    #: The time step of the latest reset or step (what the metrics count episodes from).
    last_step: JsonStep | None = None

    @abc.abstractmethod
    async def reset(self, seed: int | None, episode_id: str | None, options: Mapping[str, Any]) -> JsonStep: ...

    @abc.abstractmethod
    async def step(self, action: Any, timeout: float | None = None) -> JsonStep:
        """Apply an action given as canonical JSON (tool envs: OpenEnv's call_tool dict)."""

    @abc.abstractmethod
    async def state(self) -> tuple[str, int, str, Any]:
        """(episode_id, step_count, status name, environment state as JSON)."""

    @abc.abstractmethod
    async def list_tools(self) -> list[Tool]: ...

    @abc.abstractmethod
    async def call_tool(self, name: str, arguments: Mapping[str, Any], timeout: float | None = None) -> ToolResult: ...

    @abc.abstractmethod
    def on_terminate(self, callback: Callable[[EnvError], None] | None) -> None:
        """Register how the transport ends this session (idle timeout, drain)."""

    async def render(self) -> dict[str, Any]:
        """The environment's picture of its state (``openenv.render`` on ``/ws``, what the
        playground draws); UNIMPLEMENTED when the environment has none."""
        raise Unimplemented("this environment has no render hook")

    @property
    def env_seconds(self) -> float | None:
        """Seconds spent in the environment's code so far (metrics), None when unknown."""
        return None

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session and free its slot (idempotent)."""


class SessionServer(Protocol):
    """What serves ``/ws``'s translated streams: :meth:`openenv.engine.Engine.serve`'s shape.

    The local engine, or the bridge's relay onto a remote server
    (:class:`openenv.bridge.remote.RemoteRelay`). ``attach``: a session another listener
    opened and keeps (what :meth:`Backend.attach_target` returns), driven by this stream
    and left open when it ends."""

    async def serve(self, stream: Stream, *, attach: Any = None) -> None: ...


class Backend(abc.ABC):
    """A source of sessions plus the environment's description.

    ``engine`` serves ``/ws`` (:class:`openenv.http.ws.WsStream`); the translation methods
    below (:meth:`decode_action`, :meth:`json_step_of`, :meth:`json_state_of`, and for a
    stream whose engine encodes results itself :meth:`json_step`, :meth:`json_state`) are
    what the stream asks of the backend, so one translator serves every backend.
    """

    info: environment_pb2.EnvironmentInfo
    #: True when step actions are tool calls (``openenv.v1.CallToolRequest``).
    tool_actions: bool = False
    engine: SessionServer

    def decode_action(self, data: Any) -> Any:
        """A step's action from its canonical JSON, in the form :attr:`engine` takes it
        (:class:`openenv.engine.Prepared`); raises :class:`InvalidArgument`."""
        raise Unimplemented(f"{type(self).__name__} decodes no actions")

    def json_step(self, r: StepResult[Any]) -> JsonStep:
        """A time step of this process as the JSON the frames carry."""
        raise Internal(f"{type(self).__name__} has no time steps of this process")

    def json_state(self, st: SessionState) -> tuple[str, int, str, Any]:
        """A state of this process as (episode_id, step_count, status name, state as JSON)."""
        raise Internal(f"{type(self).__name__} has no states of this process")

    @abc.abstractmethod
    def json_step_of(self, ts: environment_pb2.TimeStep) -> JsonStep:
        """:meth:`json_step` of a time step in protobuf form."""

    @abc.abstractmethod
    def json_state_of(self, st: environment_pb2.StateResponse) -> tuple[str, int, str, Any]:
        """:meth:`json_state` of a state in protobuf form."""

    def local_session(self, session_id: str) -> Session | None:
        """The runtime's session of that id when it runs in this process (render, metrics)."""
        return None

    def attach_target(self, session: BackendSession) -> Any:
        """What :attr:`engine` attaches a ``/ws?session_id=`` stream to, for a session of the
        registry (``openenv/session/create``)."""
        return session

    @abc.abstractmethod
    async def open(self, options: Mapping[str, Any] | None = None, client_name: str = "") -> BackendSession:
        """Open a session; raises the error of the table (capacity, drain, factory)."""

    @property
    @abc.abstractmethod
    def active(self) -> int:
        """Sessions holding a slot (local) or opened through this bridge (remote)."""

    @property
    def max_sessions(self) -> int:
        return self.info.capabilities.max_sessions

    @property
    def draining(self) -> bool:
        return False

    async def load(self) -> load_pb2.ServerLoad | None:
        """The live load (RFC 0005) for ``GET /load``; None where there is none to report."""
        return None

    async def start(self) -> None:
        """Called once before serving."""
        return None

    async def stop(self) -> None:
        """Called once after serving."""
        return None


_BACKGROUND: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """Run ``coro`` in the background, keeping a reference until it finishes."""
    task = asyncio.ensure_future(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    return task


# --------------------------------------------------------------------------- local


def _json_of(codec: Codec, value: Any) -> Any:
    if type(value) in _PLAIN and not isinstance(codec, (MessageCodec, TensorCodec)):
        return value
    return codec.to_json(value)


class LocalSession(BackendSession):
    """A :class:`openenv.session.Session` of this process."""

    __slots__ = ("_b", "_s", "id", "last_step")

    def __init__(self, backend: LocalBackend, session: Session) -> None:
        self._b = backend
        self._s = session
        self.id = session.id
        self.last_step: JsonStep | None = None

    @property
    def session(self) -> Session:
        """The runtime's session this one wraps."""
        return self._s

    async def reset(self, seed: int | None, episode_id: str | None, options: Mapping[str, Any]) -> JsonStep:
        self.last_step = ts = self._b.json_step(await self._s.reset(seed, episode_id, options))
        return ts

    async def step(self, action: Any, timeout: float | None = None) -> JsonStep:
        before = self._s.status
        result = await self._s.step(self._b.decode_action(action), timeout)
        try:
            self.last_step = ts = self._b.json_step(result)
            return ts
        except Exception as e:
            self._s.retract_step(before)  # an answer that cannot be sent is not a step
            raise Internal(f"the step's result cannot be encoded: {type(e).__name__}: {e}") from e

    async def state(self) -> tuple[str, int, str, Any]:
        return self._b.json_state(await self._s.state())

    async def list_tools(self) -> list[Tool]:
        return await self._s.list_tools()

    async def call_tool(self, name: str, arguments: Mapping[str, Any], timeout: float | None = None) -> ToolResult:
        return await self._s.call_tool(name, arguments, timeout)

    def on_terminate(self, callback: Callable[[EnvError], None] | None) -> None:
        if callback is None:
            self._s._terminate = None
        else:
            self._s.on_terminate(callback)

    async def close(self) -> None:
        await self._s.close()

    async def render(self) -> dict[str, Any]:
        return render_to_json(await self._s.render())

    @property
    def env_seconds(self) -> float | None:
        return self._s.env_seconds


class LocalBackend(Backend):
    """The sessions of an in-process server (shares its ``SessionManager``).

    ``engine``: the protocol engine ``/ws`` is translated onto (:class:`openenv.http.ws.WsStream`):
    the server's own (:attr:`openenv.Host.engine`), so every listener shares one pool of
    sessions and one dispatcher; by default one over ``manager``. The JSON of time steps and
    states comes from :meth:`json_step` and :meth:`json_state`, on every path of the HTTP side.
    """

    def __init__(self, manager: SessionManager, *, engine: Engine | None = None) -> None:
        self.manager = manager
        self.engine: Engine = engine if engine is not None else Engine(manager)
        rt = manager.runtime
        self.info = rt.info
        self.action_codec = rt.action_codec
        self.obs_codec = rt.observation_codec
        self.state_codec = rt.state_codec
        ac = self.action_codec
        self.tool_actions = isinstance(ac, MessageCodec) and ac.full_name == CALL_TOOL
        self._adapted_tool = isinstance(ac, AdaptedCodec) and ac.view is CallToolAction
        self._message_fields: frozenset[str] = frozenset()
        if isinstance(ac, MessageCodec):
            d = ac.cls.DESCRIPTOR
            self._message_fields = frozenset(f.name for f in d.fields) | frozenset(f.json_name for f in d.fields)
        # OpenEnv's Action carries ``metadata`` on every action: dropped, as framing, unless
        # the action type itself has such a field (strict validation refuses unknown fields).
        self._strip_metadata = bool(self._message_fields) and "metadata" not in self._message_fields
        if not isinstance(ac, MessageCodec) and ac.kind == payload_pb2.PAYLOAD_KIND_JSON:
            props = ac.json_schema().get("properties")
            self._strip_metadata = isinstance(props, dict) and "metadata" not in props

    def json_step(self, r: StepResult[Any]) -> JsonStep:
        """A time step as the JSON the frames carry (raises when its metadata is not JSON:
        the step is then not counted, as an answer that cannot be sent is not a step)."""
        obs = r.observation
        bd = r.reward_breakdown
        if r.metadata:
            dumps(r.metadata)  # fails here, where the step can be uncounted, not at send time
        return JsonStep(
            None if obs is None else _json_of(self.obs_codec, obs),
            r.reward,
            r.terminated,
            r.truncated,
            r.metadata,
            r.episode_id,
            r.step_count,
            None if bd is None else message_to_json(bd.to_proto() if hasattr(bd, "to_proto") else bd),
            self.tool_actions,
        )

    def json_state(self, st: SessionState) -> tuple[str, int, str, Any]:
        """(episode_id, step_count, status name, environment state as JSON)."""
        value = st.state
        return (
            st.episode_id,
            st.step_count,
            st.status.name,
            None if value is None else _json_of(self.state_codec, value),
        )

    def json_step_of(self, ts: environment_pb2.TimeStep) -> JsonStep:
        """:meth:`json_step` of a time step already in protobuf form."""
        return frames.json_step(ts, self._observation_json, tool=self.tool_actions)

    def json_state_of(self, st: environment_pb2.StateResponse) -> tuple[str, int, str, Any]:
        """:meth:`json_state` of a state already in protobuf form."""
        try:
            status = EpisodeStatus(st.status).name
        except ValueError:
            status = str(st.status)
        return (
            st.episode_id,
            st.step_count,
            status,
            self._state_json.to_json(st.state) if st.HasField("state") else None,
        )

    @functools.cached_property
    def _observation_json(self) -> PayloadJson:
        return PayloadJson(self.info.observation, self.info)

    @functools.cached_property
    def _state_json(self) -> PayloadJson:
        return PayloadJson(self.info.state, self.info)

    def attach_target(self, session: BackendSession) -> Session:
        """The runtime's session behind one of this backend's sessions (what the engine attaches to)."""
        if not isinstance(session, LocalSession):
            raise Internal(f"not a session of this server: {type(session).__name__}")
        return session.session

    def local_session(self, session_id: str) -> Session | None:
        return self.manager.sessions.get(session_id)

    def decode_action(self, data: Any) -> Any:
        """An action from its JSON form (raises :class:`InvalidArgument`)."""
        ac = self.action_codec
        if self.tool_actions and isinstance(data, dict) and data.get("type") == "call_tool":
            name, args = call_tool_args(data)
            if self._adapted_tool:
                return CallToolAction(name, args)
            return ac.from_json({"name": name, "arguments": args})
        if self._strip_metadata and isinstance(data, dict) and "metadata" in data:
            data = {k: v for k, v in data.items() if k != "metadata"}  # OpenEnv's Action.metadata
        try:
            return ac.from_json(data)
        except EnvError:
            raise
        except (TypeError, ValueError, json_format.ParseError) as e:
            raise InvalidArgument(f"invalid action: {e}") from None

    async def open(self, options: Mapping[str, Any] | None = None, client_name: str = "") -> LocalSession:
        return LocalSession(self, await self.manager.open(options, client_name))

    @property
    def active(self) -> int:
        return self.manager.active

    @property
    def max_sessions(self) -> int:
        return self.manager.runtime.max_sessions

    @property
    def draining(self) -> bool:
        return self.manager.draining

    async def load(self) -> load_pb2.ServerLoad | None:
        return server_load(self.manager)
