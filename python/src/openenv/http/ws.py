"""``/ws``: OpenEnv's session protocol over a WebSocket, translated onto the protocol engine.

:class:`WsStream` is the engine's stream of one connection (the server's own engine, the one
its gRPC listener serves): frames become ``SessionRequest`` messages and answers become frames
(docs/protocol.md §1.4 lists what reaches ``/ws``). ``openenv bridge`` (a remote gRPC server)
serves the same stream with its relay (:class:`openenv.bridge.remote.RemoteRelay`), which
forwards each request to the remote's ``Session`` stream: one translator for both.

One connection is one session, created when the connection is accepted (capacity and
factory failures: one error frame, then close 1000, as OpenEnv). Frames are JSON text,
answered in arrival order, one reply per request except ``close`` (a relay may read ahead
and forward several; their replies, and those of the frames answered here, still go out in
frame order).

Beyond OpenEnv (all additive, see docs/bridge.md):

* a frame may carry ``"id"`` (any JSON scalar): the reply carries the same ``"id"`` and
  the extended shape of :mod:`openenv.json_protocol.frames`; ``"timeout_s"`` bounds a step or a
  tool call on the server (``DEADLINE_EXCEEDED``); ``{"type": "openenv.hello"}`` returns
  the session id and the full ``EnvironmentInfo``; ``{"type": "openenv.render"}`` returns
  the environment's picture of its current state (``Environment.render``, as
  :func:`openenv.json_protocol.render.render_to_json` shapes it; ``UNIMPLEMENTED`` without one), what
  the ``/web`` playground draws. Stock clients never send these.
* ``?session_id=`` attaches to a session created with ``openenv/session/create`` on
  ``POST /mcp`` (OpenEnv 0.10's production ``MCPToolClient``); ``?options=<JSON object>``
  and ``?client_name=`` reach the environment factory.
* the session's idle timeout and the server's drain end the connection with an error
  frame then a close, freeing the slot; uvicorn's keepalive pings detect half-open
  sockets, whose disconnect frees the slot too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qs

from openenv.engine import Prepared
from openenv.errors import EnvError, ErrorCode, Internal, InvalidArgument, ResourceExhausted, Unimplemented
from openenv.http.limits import PARSED, UNPARSED, bounded_loads
from openenv.http.mcp import handle_jsonrpc, mcp_result, mcp_tool
from openenv.json_protocol import frames
from openenv.json_protocol.jsonrpc import error_of as rpc_error
from openenv.json_protocol.jsontext import dumpb, least_size
from openenv.json_protocol.render import render_to_json
from openenv.protocol import PROTOCOL_VERSION, SessionState, StepResult
from openenv.runtime.tools import Tool, ToolResult
from openenv.v1 import environment_pb2
from openenv.values import to_struct

if TYPE_CHECKING:
    from openenv.http.backend import Backend, EngineSession, SessionServer
    from openenv.http.context import AppContext
    from openenv.runtime.session import Session

log = logging.getLogger("openenv.http")

__all__ = ["WsStream", "reply_frame", "serve_ws"]

_REFUSAL_GRACE_S = 5.0  # a refused client's first request still reads the refusal (not a closed socket)
_INVALID_MESSAGE = frames.protocol_error(
    "Invalid message",
    "VALIDATION_ERROR",
    errors=[{"type": "model_type", "loc": [], "msg": "Input should be an object"}],
)


async def _close(send: Any, code: int = 1000, reason: str = "") -> None:
    try:
        await send({"type": "websocket.close", "code": code, "reason": reason})
    except (OSError, RuntimeError):  # already gone
        pass


class _Aborted(Exception):
    """The engine ended the stream (idle timeout, drain): its frame and close are sent."""


def _peer(scope: dict[str, Any]) -> str:
    """The ASGI client address in gRPC's peer form (what the engine counts sessions by)."""
    client = scope.get("client")
    if not client:
        return ""
    host, port = str(client[0]), client[1] if len(client) > 1 else 0
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


def _options(query: dict[str, list[str]]) -> dict[str, Any]:
    raw = (query.get("options") or [""])[0]
    if not raw:
        return {}
    try:
        options = frames.loads(raw)
    except ValueError:
        raise InvalidArgument("the options query parameter is not JSON", fatal=True) from None
    if not isinstance(options, dict):
        raise InvalidArgument("the options query parameter must be a JSON object", fatal=True)
    return options


async def serve_ws(app: AppContext, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Run one ``/ws`` connection to its end, on the backend's engine (the server's own, or
    ``openenv bridge``'s relay onto its remote server)."""
    backend = app.backend
    msg = await receive()
    if msg["type"] != "websocket.connect":
        return
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    attach_id = (query.get("session_id") or [""])[0]
    if attach_id and app.peers is not None and (index := app.peers.sibling_of(attach_id)) is not None:
        # A sibling's session (workers): the connection is relayed to it, from its connect on.
        if await app.peers.relay_asgi(index, scope, _replayed(msg, receive), send):
            return  # else the sibling is gone, and so is its session: unknown here, as answered below
    await send({"type": "websocket.accept"})
    server: SessionServer = backend.engine
    hs = environment_pb2.HandshakeRequest(protocol_version=PROTOCOL_VERSION)
    try:
        if attach_id:  # a session of the registry: relayed into its own engine stream
            owner = app.registry.attach(attach_id)
            server = _Attached(owner)
        elif "join_token" in query or "agent_ids" in query:  # never ignored: a token is checked or refused
            raise Unimplemented(
                "/ws carries self-play sessions only: joining a world or choosing agents needs gRPC or the "
                "binary WebSocket (RFC 0012, Transports)",
                fatal=True,
            )
        else:
            to_struct(_options(query), hs.options)
            hs.client_name = (query.get("client_name") or ["openenv-ws"])[0]
    except EnvError as e:
        await WsStream.refuse(e, receive, send)
        return
    stream = WsStream(app, backend, scope, receive, send, hs)
    try:
        await server.serve(stream)
    except _Aborted:
        pass
    finally:
        if attach_id:
            app.registry.detach(attach_id)


def _replayed(first: dict[str, Any], receive: Any) -> Any:
    """``receive`` that first hands out ``first`` (an already received message)."""
    pending = [first]

    async def replayed() -> Any:
        return pending.pop() if pending else await receive()

    return replayed


class _Attached:
    """An :class:`EngineSession` of the registry as what serves a ``/ws`` stream."""

    def __init__(self, owner: EngineSession) -> None:
        self.owner = owner

    async def serve(self, stream: Any) -> None:
        await self.owner.relay(stream)


class WsStream:
    """One ``/ws`` connection as the engine's :class:`~openenv.engine.Stream`: OpenEnv's frames
    translated into protocol requests, and the engine's answers back into frames.

    The handshake is synthesised from the connection's query (``options``, ``client_name``);
    a step's action, a reset's options and a tool call's arguments reach the engine decoded
    (:class:`~openenv.engine.Prepared`), and time steps, states and tool results come back as
    Python values (``encode_result``), so the JSON path costs no protobuf round trip. Frames
    with no request kind in the protocol (``openenv.hello``, ``openenv.render``, JSON-RPC
    methods other than ``tools/list`` and ``tools/call``, and every malformed frame) are
    answered here, in the order the frames came, from the session the engine opened.
    """

    relayed = False  # a client's own stream (not relayed by a sibling worker)

    def __init__(
        self,
        app: AppContext,
        backend: Backend,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
        handshake: environment_pb2.HandshakeRequest,
    ) -> None:
        self.app, self.backend, self.scope = app, backend, scope
        self.receive, self.send = receive, send
        self._hello: environment_pb2.SessionRequest | None = environment_pb2.SessionRequest(handshake=handshake)
        self._opened = False
        self.id = ""  # the session's, once open (the observing middleware reads id, last_step, env_seconds)
        self.last_step: frames.JsonStep | None = None
        self._session: Session | None = None
        # Every frame read and not yet answered, in arrival order: requests handed to the
        # engine and frames answered here. Answers go out from its head only, under _turn: an
        # engine that reads ahead (the bridge's relay) calls write() while read() is answering
        # a frame of its own, and neither may overtake the other.
        self._order: collections.deque[frames.FrameRequest] = collections.deque()
        self._turn = asyncio.Lock()
        self._limit = app.max_message_bytes
        self._tool_actions = backend.tool_actions

    # ------------------------------------------------------------------ Stream

    def peer(self) -> str:
        return _peer(self.scope)

    def metadata(self) -> Sequence[tuple[str, str]]:
        return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in self.scope.get("headers") or ()]

    @property
    def env_seconds(self) -> float | None:
        return None if self._session is None else self._session.env_seconds

    async def read(self) -> environment_pb2.SessionRequest | Prepared | None:
        if self._hello is not None:
            hello, self._hello = self._hello, None
            return hello
        while True:
            msg = await self.receive()
            if msg["type"] != "websocket.receive":
                return None  # websocket.disconnect
            try:
                frame = _frame(msg)
            except ValueError as e:
                await self._local(None, frames.protocol_error(f"Invalid JSON: {e}", "INVALID_JSON"))
                continue
            del msg  # the request's text goes once parsed (peak memory per message)
            if type(frame) is not dict:
                await self._local(None, _INVALID_MESSAGE)
                continue
            try:
                fr = frames.read_frame(frame, tool_actions=self._tool_actions, parse=bounded_loads)
            except EnvError as e:
                await self._local(None, frames.error_frame(e, frame.get("id")))
                continue
            frame = None
            if fr.request is None:
                await self._local(fr, None)
                continue
            try:
                out = self._prepare(fr)
            except EnvError as e:
                await self._local(None, frames.error_frame(e, fr.rid))
                continue
            self._order.append(fr)
            return out

    def _prepare(self, fr: frames.FrameRequest) -> environment_pb2.SessionRequest | Prepared:
        """The engine's request of a frame: payloads decoded with the environment's codecs."""
        req = fr.request
        assert req is not None
        kind = req.WhichOneof("kind")
        if kind == "step":
            return Prepared(req, self.backend.decode_action(fr.value))
        if kind in ("reset", "call_tool"):
            return Prepared(req, fr.value)
        return req

    def encode_result(self, result: Any) -> Any:
        """Time steps, states, tools and tool results as the JSON the frames carry."""
        if isinstance(result, StepResult):
            self.last_step = ts = self.backend.json_step(result)
            return ts
        if isinstance(result, SessionState):
            return self.backend.json_state(result)
        return result  # list[Tool], ToolResult: shaped by write()

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        kind = response.WhichOneof("kind")
        if not self._opened:  # the handshake's answer
            if kind == "error":
                await self.refuse(EnvError.from_proto(response.error), self.receive, self.send)
                return
            self._opened = True
            self.id = response.handshake.session_id
            self._session = self.backend.local_session(self.id)
            self.scope["openenv.session"] = self  # for the observing middleware (openenv.http.observe)
            return
        async with self._turn:
            fr = self._order.popleft()  # the engine answers in request order: its frame is the head
            await self._send_answer(fr, response, kind, encoded)
            await self._answer_heads()

    async def _send_answer(
        self, fr: frames.FrameRequest, response: environment_pb2.SessionResponse, kind: str | None, encoded: Any
    ) -> None:
        if kind == "close":
            await _close(self.send, 1000)
            return
        err = EnvError.from_proto(response.error) if kind == "error" else None
        try:
            reply = self._reply(fr, response, encoded, err)
        except Exception as e:  # an answer that cannot be shaped never ends the connection
            log.warning("bridge reply to %r cannot be built", fr.typ, exc_info=True)
            reply = frames.error_frame(Internal(f"{type(e).__name__}: {e}"), fr.rid)
        if err is not None and err.fatal and reply.get("type") == "error":
            await self.send({"type": "websocket.send", "text": frames.dumps(reply)})
            await _close(self.send, 1000, err.message[:120])
            return
        text = _reply_text(reply, fr.rid, fr.typ, self._limit)
        del reply
        await self.send({"type": "websocket.send", "text": text})

    async def _answer_heads(self) -> None:
        """Answer the frames kept here that are now at the head (called under ``_turn``)."""
        while self._order and self._order[0].request is None:
            await self._answer_here(self._order[0])
            self._order.popleft()  # after its answer: until then a later frame waits behind it

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        err = EnvError.from_code(code, message)
        with contextlib.suppress(OSError, RuntimeError):
            await self.send({"type": "websocket.send", "text": frames.dumps(frames.error_frame(err))})
        await _close(self.send, 1001 if err.code is ErrorCode.UNAVAILABLE else 1000, message[:120])
        raise _Aborted(message)

    # ------------------------------------------------------------------ frames

    @staticmethod
    async def refuse(err: EnvError, receive: Any, send: Any) -> None:
        """A session that cannot be opened: one error frame, then close 1000."""
        await send({"type": "websocket.send", "text": frames.dumps(frames.error_frame(err, at_open=True))})
        # Let a client that sends its first request right away (as OpenEnv's clients do)
        # read the error as that request's reply instead of failing on a closed socket.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(receive(), _REFUSAL_GRACE_S)
        await _close(send, 1000)

    async def _local(self, fr: frames.FrameRequest | None, reply: dict[str, Any] | None) -> None:
        """Answer a frame here: now, or (when frames before it are still in the engine) when
        the engine's answer to the last of them is written."""
        if fr is None:
            fr = frames.FrameRequest(None, None, "reply", data=reply)
        self._order.append(fr)
        async with self._turn:
            await self._answer_heads()

    async def _answer_here(self, fr: frames.FrameRequest) -> None:
        if fr.shape == "reply":
            await self.send({"type": "websocket.send", "text": frames.dumps(fr.data)})
            return
        rid, typ = fr.rid, fr.typ
        try:
            if fr.shape == frames.MCP_OTHER:
                reply: dict[str, Any] = {
                    "type": "mcp",
                    "data": await handle_jsonrpc(self.app, fr.data, session_id=self.id, timeout=fr.value),
                }
                if rid is not None:
                    reply["id"] = rid
            elif fr.shape == frames.RENDER:
                if self._session is None:  # a remote server's session (openenv bridge): no render hook reaches it
                    raise Unimplemented("this environment has no render hook")
                reply = {"type": "openenv.render", "data": render_to_json(await self._session.render())}
                if rid is not None:
                    reply["id"] = rid
            elif fr.shape == frames.HELLO_SHAPE:
                reply = {
                    "type": "openenv.hello",
                    "id": rid,
                    "data": {
                        "session_id": self.id,
                        "protocol_version": self.app.protocol_version,
                        "info_b64": self.app.info_b64,
                    },
                }
            else:
                reply = frames.protocol_error(f"Unknown message type: {typ}", "UNKNOWN_TYPE", rid)
        except EnvError as e:
            reply = frames.error_frame(e, rid)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # one failed request never ends the connection
            log.warning("bridge request %r failed", typ, exc_info=True)
            reply = frames.error_frame(Internal(f"{type(e).__name__}: {e}"), rid)
        text = _reply_text(reply, rid, typ, self._limit)
        del reply
        await self.send({"type": "websocket.send", "text": text})

    def _reply(
        self, fr: frames.FrameRequest, resp: environment_pb2.SessionResponse, encoded: Any, err: EnvError | None
    ) -> dict[str, Any]:
        """The frame answering ``fr`` (:func:`reply_frame`); a time step read from protobuf is
        kept as the connection's last one."""
        if encoded is None and err is None and fr.shape in (frames.OBSERVATION, frames.TOOL_STEP):
            part = resp.reset if resp.HasField("reset") else resp.step
            encoded = self.last_step = self.backend.json_step_of(part.time_step)
        return reply_frame(self.backend, fr, resp, encoded, err)


def reply_frame(
    backend: Backend,
    fr: frames.FrameRequest,
    resp: environment_pb2.SessionResponse,
    encoded: Any,
    err: EnvError | None,
) -> dict[str, Any]:
    """The frame answering the request of ``fr`` (``/ws``, and the bodies of the stateless HTTP
    endpoints, :mod:`openenv.http.stateless`). ``encoded`` is what the stream's ``encode_result``
    made of the result; without it (a relay's answer, or one a wrapper of the engine replaced)
    the response's protobuf is read."""
    rid, shape = fr.rid, fr.shape
    if shape in (frames.MCP_LIST, frames.MCP_CALL):
        if err is not None:
            rpc = rpc_error(fr.rpc_id, err)
        elif shape == frames.MCP_LIST:
            tools = encoded if encoded is not None else [Tool.from_proto(t) for t in resp.list_tools.tools]
            rpc = {"jsonrpc": "2.0", "id": fr.rpc_id, "result": {"tools": [mcp_tool(t) for t in tools]}}
        else:
            result = encoded if encoded is not None else ToolResult.from_proto(resp.call_tool.result)
            rpc = {"jsonrpc": "2.0", "id": fr.rpc_id, "result": mcp_result(result)}
        reply = {"type": "mcp", "data": rpc}
        if rid is not None:
            reply["id"] = rid
        return reply
    if err is not None:
        if shape == frames.TOOL_STEP:
            obs = frames.tool_error_observation(fr.tool_name, err)
            if obs is not None:
                return obs
        return frames.error_frame(err, rid)
    if shape == frames.LIST_TOOLS_STEP:
        tools = encoded if encoded is not None else [Tool.from_proto(t) for t in resp.list_tools.tools]
        obs = {"tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]}
        return frames.observation_frame(frames.JsonStep(obs), rid)
    if shape == frames.STATE:
        st: tuple[str, int, str, Any] = encoded if encoded is not None else backend.json_state_of(resp.state)
        return frames.state_frame(st[0], st[1], st[2], st[3], rid)
    if encoded is None:  # OBSERVATION, TOOL_STEP
        part = resp.reset if resp.HasField("reset") else resp.step
        encoded = backend.json_step_of(part.time_step)
    return frames.observation_frame(encoded, rid)


def _frame(msg: dict[str, Any]) -> Any:
    """The parsed frame of a ``websocket.receive`` message (parsed by the observing middleware
    when there is one; ValueError when it is not JSON or refused unparsed)."""
    if PARSED in msg:
        return msg.pop(PARSED)
    if UNPARSED in msg:
        raise ValueError(msg[UNPARSED])
    raw = msg.get("text")
    if raw is None:
        raw = msg.get("bytes") or b""
    return bounded_loads(raw)


def _reply_text(reply: Any, rid: Any, typ: Any, limit: int) -> str:
    """The text of a reply: an in-band ``INTERNAL`` error when it cannot be encoded, and a
    non-fatal ``RESOURCE_EXHAUSTED`` one when it is larger than the message limit (the
    request was carried out), as the gRPC listener answers (RFC 0003)."""
    dumps = frames.dumps
    size = least_size(reply, limit)  # a tool's text result is there three times: known before encoding it
    over = f"over {size}"
    if size <= limit:
        try:
            body = dumpb(reply)  # bytes first: an oversized reply is never copied into a str
        except Exception as e:  # an answer that cannot be encoded never ends the connection
            log.warning("bridge reply to %r cannot be encoded", typ, exc_info=True)
            return dumps(frames.error_frame(Internal(f"the answer cannot be encoded: {type(e).__name__}: {e}"), rid))
        if len(body) <= limit:
            return body.decode()
        over = str(len(body))
        del body
    what = typ if isinstance(typ, str) else "request"
    err = ResourceExhausted(
        f"the reply to {what[:40]} ({over} bytes) exceeds the {limit}-byte message limit; the request was carried out"
    )
    return dumps(frames.error_frame(err, rid))
