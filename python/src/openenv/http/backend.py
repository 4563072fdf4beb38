"""What the bridge translates onto: sessions that speak canonical JSON.

A :class:`Backend` describes the environment and holds what serves its protocol streams
(:attr:`Backend.engine`); :class:`EngineSession` is a session of it that no client stream
carries (``/mcp``, ``openenv/session/create``). Two implementations exist:

* :class:`LocalBackend` (this module): the in-process ``SessionManager`` of a server, the
  same one its gRPC side uses (same capacity, same idle reaper, no extra hop);
* the bridge's remote backend (:mod:`openenv.bridge.remote`): a remote gRPC environment server in any
  language, one gRPC ``Session`` stream per bridged session.

Both decode actions from canonical JSON (:mod:`openenv.json_protocol.payloads`) and shape
time steps as :class:`~openenv.json_protocol.frames.JsonStep`\\ s; every request of a
protocol kind goes through :attr:`Backend.engine`.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

from google.protobuf import json_format

from openenv.engine import Engine, Prepared, Stream, Undecodable
from openenv.errors import EnvError, ErrorCode, FailedPrecondition, Internal, InvalidArgument, Unimplemented
from openenv.http.limits import bounded_loads
from openenv.json_protocol import frames
from openenv.json_protocol.frames import JsonStep
from openenv.json_protocol.jsontext import dumps
from openenv.json_protocol.payloads import CALL_TOOL, PayloadJson, message_to_json
from openenv.protocol import PROTOCOL_VERSION, EpisodeStatus, SessionState, StepResult
from openenv.runtime.codec import AdaptedCodec, Codec, MessageCodec, TensorCodec
from openenv.runtime.load import server_load
from openenv.runtime.session import CLIENT, Session, SessionManager
from openenv.runtime.tools import CallToolAction, Tool, ToolResult
from openenv.v1 import environment_pb2, load_pb2, payload_pb2
from openenv.values import to_struct

__all__ = ["Backend", "EngineSession", "LocalBackend", "SessionServer", "call_tool_args", "spawn"]

log = logging.getLogger("openenv.http")

_PLAIN = (dict, list, str, int, float, bool, type(None))
_T = TypeVar("_T")


def call_tool_args(data: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of OpenEnv's ``{"type": "call_tool", "tool_name", "arguments"}``
    (arguments may arrive as a JSON string, as OpenEnv accepts; read within the bridge's bounds)."""
    return frames.call_tool_args(data, bounded_loads)


class SessionServer(Protocol):
    """What serves the HTTP side's protocol streams: :meth:`openenv.engine.Engine.serve`'s shape.

    The local engine, or the bridge's relay onto a remote server
    (:class:`openenv.bridge.remote.RemoteRelay`)."""

    async def serve(self, stream: Stream) -> None: ...


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

    async def open(self, options: Mapping[str, Any] | None = None, client_name: str = "") -> EngineSession:
        """Open a session on :attr:`engine` (:class:`EngineSession`); raises the handshake's
        error (capacity, drain, factory: fatal)."""
        return await EngineSession.open(self.engine, options, client_name)

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

    async def worker_loads(self) -> load_pb2.GetLoadResponse | None:
        """With several worker processes (RFC 0013): the whole server's load and each
        worker's (``GET /load`` adds ``workers``); None for a server of one process."""
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


# --------------------------------------------------------------------------- engine sessions


def _peer_of(host: str) -> str:
    """A client host (what :data:`openenv.runtime.session.CLIENT` holds) in gRPC's peer form,
    so the engine counts the session against the same client as the request that opened it."""
    if not host:
        return ""
    return f"ipv6:[{host}]:0" if ":" in host else f"ipv4:{host}:0"


class _Pipe:
    """The in-memory :class:`~openenv.engine.Stream` of an :class:`EngineSession`: requests go
    in through a queue, each answer resolves the future of the oldest unanswered request (the
    engine, and the remote relay, answer in request order, one answer per request)."""

    def __init__(self, peer: str) -> None:
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.waiting: collections.deque[tuple[asyncio.Future[tuple[Any, Any]], Callable[[Any], Any] | None]] = (
            collections.deque()
        )
        self._peer = peer
        self.on_abort: Callable[[EnvError], None] | None = None

    async def read(self) -> Any:
        return await self.inbox.get()

    def encode_result(self, result: Any) -> Any:
        # Called by the engine for the request it is answering: the head of ``waiting``.
        encode = self.waiting[0][1] if self.waiting else None
        return result if encode is None else encode(result)

    relayed = False  # a stream of this process's own (not relayed by a sibling worker)

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        if not self.waiting:  # an answer nobody asked for (never from the engine): dropped
            return
        fut, _ = self.waiting.popleft()
        if not fut.done():  # its caller may have gone (cancelled): the answer is dropped, the order kept
            fut.set_result((response, encoded))

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        err = EnvError.from_code(code, message, fatal=True)
        if self.on_abort is not None:
            self.on_abort(err)
        raise _Ended(err)

    def peer(self) -> str:
        return self._peer

    def metadata(self) -> Sequence[tuple[str, str]]:
        return ()


class _Ended(Exception):
    """The server ended an :class:`EngineSession`'s stream (idle timeout, drain)."""

    def __init__(self, err: EnvError) -> None:
        super().__init__(err.message)
        self.err = err


class EngineSession:
    """One protocol session of the HTTP side that no client stream carries (``/mcp``, the
    sessions of ``openenv/session/create``): one :meth:`openenv.engine.Engine.serve` (or the
    remote relay's) runs over an in-memory stream, and each call sends it one protocol request.
    So every request of a protocol kind reaches the environment through the one dispatcher
    that serves gRPC and ``/ws``: same validation, limits, timeouts and error codes.

    What callers may rely on: :meth:`open` raises the handshake's error (capacity, drain,
    factory); the request methods raise the request's :class:`~openenv.errors.EnvError` and
    never end the session for a non-fatal one; requests are answered in the order they were
    sent (concurrent callers queue); :meth:`on_terminate`'s callback runs when the server
    ends the session (idle timeout, drain, a remote session lost), after which every call
    raises that error; :meth:`close` frees the session's slot once the request in progress
    is answered (idempotent).
    """

    def __init__(self, pipe: _Pipe) -> None:
        self._pipe = pipe
        self.id = ""
        self._task: asyncio.Task[None] | None = None
        self._ended: EnvError | None = None
        self._terminate: Callable[[EnvError], None] | None = None
        self._closing = False
        pipe.on_abort = self._aborted

    @classmethod
    async def open(
        cls, server: SessionServer, options: Mapping[str, Any] | None = None, client_name: str = ""
    ) -> EngineSession:
        """Open a session on ``server`` (a handshake with ``options`` and ``client_name``; the
        session is counted against the client of the calling task, as its connection's)."""
        self = cls(_Pipe(_peer_of(CLIENT.get())))
        hello = environment_pb2.SessionRequest(
            handshake=environment_pb2.HandshakeRequest(protocol_version=PROTOCOL_VERSION, client_name=client_name)
        )
        if options:
            if not isinstance(options, Mapping):
                raise InvalidArgument(f"the session options must be an object, got {type(options).__name__}")
            try:
                to_struct(dict(options), hello.handshake.options)
            except (TypeError, ValueError) as e:
                raise InvalidArgument(f"the session options are not JSON: {e}") from None
        self._task = spawn(self._run(server))
        resp, _ = await self.request(hello)
        if resp.WhichOneof("kind") == "error":
            await self._finish()
            err = EnvError.from_proto(resp.error)
            err.fatal = True
            raise err
        self.id = resp.handshake.session_id
        return self

    async def _run(self, server: SessionServer) -> None:
        try:
            await server.serve(self._pipe)
        except _Ended:
            pass
        except asyncio.CancelledError:
            pass  # the server is stopping
        except Exception as e:  # a bug of the server's stream handling: this session's error
            log.warning("engine session %s failed", self.id, exc_info=True)
            self._end(Internal(f"the session failed: {type(e).__name__}: {e}", fatal=True))
        finally:
            self._end(FailedPrecondition(f"session {self.id or '(opening)'} has ended", fatal=True))

    def _end(self, err: EnvError) -> None:
        if self._ended is None:
            self._ended = err
        while self._pipe.waiting:  # requests the stream will not answer
            fut, _ = self._pipe.waiting.popleft()
            if not fut.done():
                fut.set_exception(self._ended)

    def _aborted(self, err: EnvError) -> None:
        self._end(err)
        if self._terminate is not None and not self._closing:
            self._terminate(err)

    @property
    def ended(self) -> bool:
        """True once the session's stream has ended (closed, or ended by the server)."""
        return self._ended is not None

    def on_terminate(self, callback: Callable[[EnvError], None] | None) -> None:
        """Register what to do when the server ends the session (replaces the previous one)."""
        self._terminate = callback

    async def request(
        self, item: environment_pb2.SessionRequest | Prepared, encode: Callable[[Any], Any] | None = None
    ) -> tuple[environment_pb2.SessionResponse, Any]:
        """Send one request; its answer (an error answer included) and, for a local engine,
        what ``encode`` made of the result (the raw Python result without ``encode``; None
        from a relay, whose answers are protobuf). Raises the session's end."""
        if self._ended is not None:
            raise self._ended
        fut: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()
        self._pipe.waiting.append((fut, encode))
        self._pipe.inbox.put_nowait(item)
        return await fut

    async def _ask(
        self, item: environment_pb2.SessionRequest | Prepared
    ) -> tuple[environment_pb2.SessionResponse, Any]:
        resp, value = await self.request(item)
        if resp.WhichOneof("kind") == "error":
            raise EnvError.from_proto(resp.error)
        return resp, value

    async def list_tools(self) -> list[Tool]:
        """The environment's tools (``list_tools``)."""
        resp, tools = await self._ask(environment_pb2.SessionRequest(list_tools={}))
        return list(tools) if tools is not None else [Tool.from_proto(t) for t in resp.list_tools.tools]

    async def call_tool(self, name: str, arguments: Mapping[str, Any], timeout: float | None = None) -> ToolResult:
        """One tool call (``call_tool``; a side call: no step is counted)."""
        req = environment_pb2.SessionRequest(call_tool={"name": name})
        if timeout is not None:
            req.call_tool.timeout.FromNanoseconds(int(timeout * 1e9))
        resp, result = await self._ask(Prepared(req, dict(arguments)))
        if isinstance(result, ToolResult):
            return result
        return ToolResult.from_proto(resp.call_tool.result)

    async def relay(self, stream: Stream) -> None:
        """Drive this session from another stream (``/ws?session_id=``): the
        :class:`SessionServer` shape. Its handshake attaches (no session is opened), each
        request is sent on through :meth:`request` with the stream's ``encode_result``, and
        the answers are written back in order; ``close`` and the end of the stream detach,
        leaving the session open (its owner closes it). When the server ends the session the
        stream is aborted with that error."""
        first = await stream.read()
        if first is None:
            return
        hello = first.request if isinstance(first, Prepared) else first
        resp = environment_pb2.SessionResponse(request_id=getattr(hello, "request_id", 0))
        if self._ended is not None:
            resp.error.CopyFrom(FailedPrecondition(f"session {self.id} has ended", fatal=True).to_proto())
            await stream.write(resp)
            return
        resp.handshake.session_id = self.id
        resp.handshake.protocol_version = PROTOCOL_VERSION
        del first, hello
        encode = stream.encode_result
        ended: list[EnvError] = []
        task = asyncio.current_task()

        def terminate(err: EnvError) -> None:
            if not ended:
                ended.append(err)
                if task is not None:
                    task.cancel()

        previous, self._terminate = self._terminate, terminate
        try:
            await stream.write(resp)
            while True:
                item = await stream.read()
                if item is None:
                    return
                if isinstance(item, Undecodable):  # answered in band, as the engine does
                    out = environment_pb2.SessionResponse(request_id=item.request_id)
                    out.error.CopyFrom(InvalidArgument(item.describe("SessionRequest")).to_proto())
                    await stream.write(out)
                    continue
                req = item.request if isinstance(item, Prepared) else item
                if req.WhichOneof("kind") == "close":  # this stream detaches; the owner keeps the session
                    out = environment_pb2.SessionResponse(request_id=req.request_id)
                    out.close.SetInParent()
                    await stream.write(out)
                    return
                del req
                out, encoded = await self.request(item, encode)
                item = None
                await stream.write(out, encoded)
                if out.WhichOneof("kind") == "error" and out.error.fatal:
                    return
        except asyncio.CancelledError:
            if not ended:
                raise  # the client went away or the server is stopping
            await stream.abort(ended[0].code, ended[0].message)
        except EnvError as e:  # the session ended under a request
            await stream.abort(e.code, e.message)
        finally:
            if self._terminate is terminate:
                self._terminate = previous

    async def _finish(self) -> None:
        if self._task is not None and not self._task.done():
            self._pipe.inbox.put_nowait(None)  # the end of the input: the server closes the session
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)

    async def close(self) -> None:
        """End the session and free its slot (idempotent)."""
        self._closing = True
        await self._finish()


# --------------------------------------------------------------------------- local


def _json_of(codec: Codec, value: Any) -> Any:
    if type(value) in _PLAIN and not isinstance(codec, (MessageCodec, TensorCodec)):
        return value
    return codec.to_json(value)


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

    async def worker_loads(self) -> load_pb2.GetLoadResponse | None:
        engine = self.engine
        if not isinstance(engine, Engine) or engine.workers is None:
            return None
        return await engine.load_report()
