"""A remote gRPC environment server as a bridge backend (``openenv bridge grpc://HOST:PORT``).

Every bridged session is one ``Session`` stream to the remote server, opened with the
client's gRPC connection (:class:`openenv.client.GrpcConnection`: request ids, pipelining,
keepalive, and resumption of a dropped stream with exactly-once requests, RFC 0006), so
capacity, idle reaping and errors are the remote server's. Payloads are
converted with the remote's advertised descriptors (:mod:`openenv.json_protocol.payloads`), so the
environment may be written in any language and no stubs are needed here.

``/ws`` reaches the remote through the same translator as a local server's
(:class:`openenv.http.ws.WsStream`), served by :class:`RemoteRelay`: the engine's
``serve(stream)`` shape, forwarding each request to the remote session instead of dispatching
it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from openenv.client.grpc import GrpcConnection, channel_ready, open_channel, token_metadata
from openenv.client.load import get_load
from openenv.client.urls import parse_url
from openenv.engine import Prepared, Stream, Undecodable, status_of
from openenv.errors import EnvError, InvalidArgument, Unavailable
from openenv.http.backend import Backend, call_tool_args
from openenv.json_protocol import frames
from openenv.json_protocol.frames import JsonStep
from openenv.json_protocol.payloads import CALL_TOOL, PayloadJson
from openenv.protocol import PROTOCOL_VERSION, EpisodeStatus
from openenv.v1 import environment_pb2, environment_pb2_grpc, load_pb2, payload_pb2
from openenv.values import from_struct, to_struct

__all__ = ["RemoteBackend", "RemoteRelay", "RemoteSession"]

MAX_IN_FLIGHT = 32
"""Most requests of one ``/ws`` stream forwarded to the remote and not yet answered: the
relay reads ahead (a client that sends frames without waiting gets the remote's pipelining),
within this bound (memory per connection)."""


class RemoteSession:
    """One remote ``Session`` stream (what :class:`RemoteRelay` forwards a stream's requests to)."""

    def __init__(self, backend: RemoteBackend, conn: GrpcConnection) -> None:
        self._b = backend
        self._c = conn
        self.id = conn.session_id
        self._terminate: Callable[[EnvError], None] | None = None
        self._closing = False
        conn.on_end(self._ended)

    def _ended(self, err: EnvError) -> None:
        if not self._closing and self._terminate is not None:
            self._terminate(err)

    async def forward(self, req: environment_pb2.SessionRequest) -> environment_pb2.SessionResponse:
        """The remote's answer to one request, an error answer included (never raises an
        :class:`EnvError`: a failure of the connection is the request's error answer)."""
        try:
            return await self._c.request(req)
        except EnvError as e:
            resp = environment_pb2.SessionResponse(request_id=req.request_id)
            resp.error.CopyFrom(status_of(e))
            return resp

    def on_terminate(self, callback: Callable[[EnvError], None] | None) -> None:
        """Register how the relay ends its stream when the remote ends the session."""
        self._terminate = callback

    async def close(self) -> None:
        """Close the remote stream (idempotent)."""
        if self._closing:
            return
        self._closing = True
        self._b._open.discard(self)
        await self._c.close()


class RemoteBackend(Backend):
    """Sessions on a remote gRPC environment server."""

    def __init__(
        self,
        target: str,
        info: environment_pb2.EnvironmentInfo,
        *,
        connect_timeout: float = 30.0,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.target = target
        self.token, self.ca_file = token, ca_file
        self.info = info
        self.connect_timeout = connect_timeout
        self.action = PayloadJson(info.action, info)
        self.observation = PayloadJson(info.observation, info)
        self.state = PayloadJson(info.state, info)
        self.tool_actions = info.action.message_type == CALL_TOOL
        self.action_fields = self.action.fields()
        # A message type without a ``metadata`` field: OpenEnv's Action.metadata is framing.
        self._strip_metadata = bool(self.action_fields) and "metadata" not in self.action_fields
        self._open: set[RemoteSession] = set()
        self._draining = False
        self.engine = RemoteRelay(self)

    def decode_action(self, data: Any) -> payload_pb2.Payload:
        """A step's action from canonical JSON as the remote's payload (OpenEnv's ``call_tool``
        dict for tool environments; OpenEnv's ``Action.metadata`` dropped unless the action
        type has such a field); raises :class:`InvalidArgument`."""
        if self.tool_actions and isinstance(data, dict) and data.get("type") == "call_tool":
            name, args = call_tool_args(data)
            data = {"name": name, "arguments": args}
        elif isinstance(data, dict) and "metadata" in data and self._strip_metadata:
            data = {k: v for k, v in data.items() if k != "metadata"}  # OpenEnv's Action.metadata
        return self.action.from_json(data, payload_pb2.Payload())

    def json_step_of(self, ts: environment_pb2.TimeStep) -> JsonStep:
        return frames.json_step(ts, self.observation, tool=self.tool_actions)

    def json_state_of(self, st: environment_pb2.StateResponse) -> tuple[str, int, str, Any]:
        try:
            status = EpisodeStatus(st.status).name
        except ValueError:
            status = str(st.status)
        return st.episode_id, st.step_count, status, self.state.to_json(st.state) if st.HasField("state") else None

    @classmethod
    async def connect(
        cls, target: str, *, connect_timeout: float = 30.0, token: str | None = None, ca_file: str | None = None
    ) -> RemoteBackend:
        """Fetch the remote environment's description (``GetInfo``) and build the backend;
        ``token`` and ``ca_file`` are sent to / trusted of the remote server."""
        scheme, hostport = parse_url(target)
        if scheme not in ("grpc", "grpcs"):
            raise ValueError(f"openenv bridge needs a grpc(s)://HOST:PORT target, got {target!r}")
        ch = open_channel(hostport, secure=scheme == "grpcs", ca_file=ca_file)
        if not await channel_ready(ch, connect_timeout):
            raise Unavailable(f"cannot reach {target} within {connect_timeout:g} s", fatal=True)
        try:
            resp = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
                environment_pb2.GetInfoRequest(), timeout=connect_timeout, metadata=token_metadata(token)
            )
        except grpc.aio.AioRpcError as e:
            if e.code() is grpc.StatusCode.UNAUTHENTICATED:
                raise EnvError.from_code(e.code().value[0], f"GetInfo on {target}: {e.details()}", fatal=True) from e
            raise Unavailable(f"GetInfo on {target} failed: {e.code().name}: {e.details()}", fatal=True) from e
        finally:
            await ch.close()
        return cls(target, resp.info, connect_timeout=connect_timeout, token=token, ca_file=ca_file)

    async def open_remote(self, options: Mapping[str, object] | None = None, client_name: str = "") -> RemoteSession:
        """One ``Session`` stream to the remote server (what :class:`RemoteRelay` serves a
        stream's handshake with); raises its handshake's error, fatal."""
        if self._draining:
            raise Unavailable("the bridge is shutting down", fatal=True)
        scheme, hostport = parse_url(self.target)
        conn = GrpcConnection(
            hostport, url=self.target, token=self.token, secure=scheme == "grpcs", ca_file=self.ca_file
        )
        hs = environment_pb2.HandshakeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_name=f"openenv-bridge/{client_name or 'ws'}",
            resumable=True,  # RFC 0006: a dropped bridge-to-server connection is resumed, steps applied once
        )
        to_struct(dict(options or {}), hs.options)
        try:
            await conn.open(hs, self.connect_timeout)
        except EnvError as e:
            e.fatal = True
            raise
        s = RemoteSession(self, conn)
        self._open.add(s)
        return s

    @property
    def active(self) -> int:
        return len(self._open)

    @property
    def draining(self) -> bool:
        return self._draining

    async def load(self) -> load_pb2.ServerLoad | None:
        """The remote server's own load (GetLoad), when it reports one."""
        if not self.info.capabilities.load_reporting:
            return None
        scheme, hostport = parse_url(self.target)
        async with open_channel(hostport, secure=scheme == "grpcs", ca_file=self.ca_file) as ch:
            return await get_load(ch, self.connect_timeout, target=self.target, token=self.token)

    async def stop(self) -> None:
        self._draining = True
        for s in list(self._open):
            if s._terminate is not None:
                s._terminate(Unavailable("the bridge is shutting down", fatal=True))
        for s in list(self._open):
            await s.close()


_Answer = asyncio.Future[environment_pb2.SessionResponse] | environment_pb2.SessionRequest | None
"""What the relay's reader hands its writer, in request order: the future answer of a forwarded
request, the close request (carried out once the answers before it are written), or None (the
end of the client's input)."""


class RemoteRelay:
    """``/ws`` of ``openenv bridge``: :meth:`openenv.engine.Engine.serve`'s shape over a remote
    server's sessions (:attr:`RemoteBackend.engine`).

    The stream's handshake (what :class:`openenv.http.ws.WsStream` synthesises from the
    connection's query) opens a remote session (:meth:`RemoteBackend.open`: its options and
    client name; capacity, factory and drain refusals are the handshake's error answer).
    Every later request is forwarded as it is read: a :class:`~openenv.engine.Prepared`
    one gets its JSON payload encoded with the remote's descriptors, and the remote's answers
    are written back in request order, as protobuf (the stream shapes them). Reading runs
    ahead of the answers (up to :data:`MAX_IN_FLIGHT` requests), so a client that does not
    wait for each reply gets the remote's pipelining; the stream answers the frames it keeps
    for itself in frame order. A session the remote ends (idle timeout, drain, a dropped
    connection that cannot be resumed) ends the stream with its error (``abort``); ``close``
    and the end of the stream close the remote session.
    """

    def __init__(self, backend: RemoteBackend) -> None:
        self.backend = backend

    async def serve(self, stream: Stream) -> None:
        first = await stream.read()
        if first is None:
            return
        hello = first.request if isinstance(first, Prepared) else first
        if isinstance(hello, Undecodable) or hello.WhichOneof("kind") != "handshake":
            # A bug of the stream (WsStream always synthesises one), not something a client sent.
            raise InvalidArgument("the relay's first request must be a handshake")
        resp = environment_pb2.SessionResponse(request_id=hello.request_id)
        hs = hello.handshake
        try:
            session = await self.backend.open_remote(from_struct(hs.options), hs.client_name)
        except EnvError as e:
            e.fatal = True
            resp.error.CopyFrom(status_of(e))
            await stream.write(resp)
            return
        del first, hello
        ended: list[EnvError] = []
        task = asyncio.current_task()

        def terminate(err: EnvError) -> None:
            if not ended:
                ended.append(err)
                if task is not None:  # runs in the connection's loop: the remote's reader
                    task.cancel()

        session.on_terminate(terminate)
        resp.handshake.session_id = session.id
        resp.handshake.protocol_version = PROTOCOL_VERSION
        window: asyncio.Queue[_Answer] = asyncio.Queue(MAX_IN_FLIGHT)
        reader: asyncio.Task[None] | None = None
        try:
            await stream.write(resp)
            reader = asyncio.ensure_future(self._read_ahead(stream, session, window))
            while True:
                answer = await window.get()
                if answer is None:
                    return
                if isinstance(answer, environment_pb2.SessionRequest):  # close, after every answer before it
                    await session.close()
                    closed = environment_pb2.SessionResponse(request_id=answer.request_id)
                    closed.close.SetInParent()
                    await stream.write(closed)
                    return
                out = await answer
                await stream.write(out)
                kind = out.WhichOneof("kind")
                if kind == "close" or (kind == "error" and out.error.fatal):
                    return
        except asyncio.CancelledError:
            if not ended:
                raise  # the client went away or the server is stopping
            err = ended[0]
            await stream.abort(err.code, err.message)
        finally:
            session.on_terminate(None)
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
            while not window.empty():  # requests read and not answered: the client is gone
                left = window.get_nowait()
                if isinstance(left, asyncio.Future):
                    left.cancel()
            await asyncio.shield(session.close())

    async def _read_ahead(
        self,
        stream: Stream,
        session: RemoteSession,
        window: asyncio.Queue[_Answer],
    ) -> None:
        """Forward each request as it is read; its answer's future joins ``window`` in order."""
        try:
            while True:
                item = await stream.read()
                if item is None:
                    return
                if isinstance(item, Undecodable):  # not made by WsStream; answered in band all the same
                    resp = environment_pb2.SessionResponse(request_id=item.request_id)
                    resp.error.CopyFrom(status_of(InvalidArgument(item.describe("SessionRequest"))))
                    done: asyncio.Future[environment_pb2.SessionResponse] = asyncio.get_running_loop().create_future()
                    done.set_result(resp)
                    await window.put(done)
                    continue
                try:
                    req = self._request_of(item)
                except (TypeError, ValueError) as e:  # a value with no JSON form: its answer is the error
                    resp = environment_pb2.SessionResponse()
                    resp.error.CopyFrom(status_of(InvalidArgument(f"cannot encode the request: {e}")))
                    done = asyncio.get_running_loop().create_future()
                    done.set_result(resp)
                    await window.put(done)
                    continue
                if req.WhichOneof("kind") == "close":  # the remote session is closed, not left to its reaper
                    await window.put(req)
                    return
                # Tasks start in creation order, and a request takes its id and its place in the
                # connection's outbox before its first await: the remote gets them in frame order.
                await window.put(asyncio.ensure_future(session.forward(req)))
        finally:
            await window.put(None)  # the end of the input, after every answer before it

    def _request_of(self, item: environment_pb2.SessionRequest | Prepared) -> environment_pb2.SessionRequest:
        """The remote's request: a prepared one's JSON payload encoded into it."""
        if not isinstance(item, Prepared):
            return item
        req = item.request
        kind = req.WhichOneof("kind")
        if kind == "step":
            req.step.action.CopyFrom(item.action)  # decode_action made it the remote's payload
        elif kind == "reset" and item.action:
            to_struct(item.action, req.reset.options)
        elif kind == "call_tool" and item.action:
            to_struct(item.action, req.call_tool.arguments)
        return req
