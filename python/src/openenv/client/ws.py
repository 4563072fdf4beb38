"""OpenEnv's WebSocket protocol as a client transport: a session on ``/ws``.

``EnvClient("http://host:8000")`` (or ``https://``, ``ws://``, ``wss://``) uses this
connection instead of gRPC. It is a :class:`~openenv.client.session.ClientSession` over a
:class:`WsChannel` that translates: each protocol request becomes an OpenEnv frame and each
reply frame the protocol's answer (:class:`openenv.json_protocol.frames.FrameTranslator`), so
everything above it works unchanged. It speaks to:

* **our servers** (``openenv serve``'s HTTP side, ``openenv bridge``): detected by the
  ``openenv.hello`` frame at connect. Frames then carry a correlation ``"id"`` that the
  server echoes, so a client-side timeout never shifts later replies (the late reply is
  matched by id and dropped), pipelining works, and time steps arrive complete;
* **stock OpenEnv servers**: detected by their ``UNKNOWN_TYPE`` answer to the hello.
  Frames carry no id (OpenEnv's envelope forbids extra keys), replies are matched in
  order, and **a client-side timeout drops the connection** (the session ends with a
  fatal ``DEADLINE_EXCEEDED``) so that a late reply can never be taken for the answer
  to a later request (OpenEnv issue #1143).

``keepalive_s`` (:class:`~openenv.client.ConnectionOptions`) is the WebSocket ping interval
(0: no pings). Needs the ``http`` extra (websockets, httpx).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any
from urllib.parse import quote

from openenv.client.options import ConnectionOptions
from openenv.client.session import ClientSession
from openenv.client.urls import is_loopback, split_url
from openenv.errors import (
    EnvError,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from openenv.json_protocol import frames
from openenv.json_protocol.frames import FrameTranslator, Outgoing
from openenv.observability import tracing
from openenv.security import client_ssl_context
from openenv.v1 import environment_pb2
from openenv.values import from_struct

__all__ = ["WsChannel", "WsConnection", "WsDialer"]


def _require(module: str) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise ImportError(
            f"http(s):// and ws(s):// environment URLs need the http extra (pip install 'protoenv[http]'): {e}"
        ) from e


def _refusal(e: Exception) -> EnvError | None:
    """UNAUTHENTICATED / PERMISSION_DENIED for a WebSocket upgrade answered 401 / 403."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    if response is None or status not in (401, 403):
        return None
    detail = ""
    with contextlib.suppress(Exception):
        detail = str(frames.loads(response.body).get("detail", ""))
    cls = Unauthenticated if status == 401 else PermissionDenied
    return cls(f"the server refused the connection ({status}){': ' + detail if detail else ''}", fatal=True)


class WsChannel:
    """One OpenEnv ``/ws`` WebSocket, translated; a :class:`~openenv.client.channel.Channel`.

    Requests become frames (the request id as the frame's ``"id"`` on our servers); replies
    become answers, with their requests' ids (by the echoed id, or in order from a stock
    server). What OpenEnv's frames have no message for is answered by ``send`` itself: the
    handshake (from the server's hello) and ``close`` (no reply)."""

    def __init__(
        self,
        ws: Any,
        info: environment_pb2.EnvironmentInfo,
        session_id: str,
        *,
        extended: bool,
        limit: int,
    ) -> None:
        self._ws = ws
        self.info, self.session_id, self.extended = info, session_id, extended
        self._tr = FrameTranslator(info, extended=extended)
        self._limit = limit
        self._by_id: dict[int, Outgoing] = {}  # our servers: requests awaiting the reply with their id
        self._fifo: collections.deque[Outgoing] = collections.deque()  # stock servers: in order
        exceptions = _require("websockets.exceptions")
        self._closed, self._closed_ok = exceptions.ConnectionClosed, exceptions.ConnectionClosedOK
        self._over = False  # the stream ended (and _why says why: None for the end this side chose)
        self._why: EnvError | None = None
        self._ending = False  # this side closed the socket: its end is the stream's normal end

    def _end(self, why: EnvError | None) -> EnvError | None:
        if not self._over:
            self._over, self._why = True, (None if self._ending else why)
        return self._why

    async def send(self, request: environment_pb2.SessionRequest) -> environment_pb2.SessionResponse | None:
        if self._over:
            raise self._why or Unavailable("the WebSocket is closed", fatal=True)
        rid = request.request_id
        if request.WhichOneof("kind") == "handshake":  # the socket opened the session: its hello answers
            resp = environment_pb2.SessionResponse(request_id=rid)
            resp.handshake.session_id = self.session_id
            resp.handshake.info.CopyFrom(self.info)
            return resp
        out = self._tr.encode(request)  # raises (not fatal) for what the frames cannot carry
        frame = out.frame
        if self.extended:
            frame["id"] = rid
        text = frames.dumps(frame)
        if len(text) > self._limit:
            raise ResourceExhausted(f"request of {len(text)} bytes exceeds the {self._limit}-byte limit")
        if out.reply:
            if self.extended:
                self._by_id[rid] = out
            else:
                self._fifo.append(out)
        try:
            await self._ws.send(text)
        except Exception as e:
            self._by_id.pop(rid, None)
            raise Unavailable(f"the WebSocket failed: {e}", fatal=True) from e
        if out.reply:
            return None
        resp = environment_pb2.SessionResponse(request_id=rid)  # OpenEnv's close has no answer:
        resp.close.SetInParent()  # its writing is the answer
        return resp

    async def receive(self) -> environment_pb2.SessionResponse | None:
        while not self._over:
            try:
                raw = await self._ws.recv()
            except self._closed as e:
                if isinstance(e, self._closed_ok):  # a normal close the server chose
                    self._end(Unavailable("the server closed the session", fatal=True))
                else:
                    code = e.rcvd.code if e.rcvd else "no close frame"
                    self._end(Unavailable(f"the WebSocket closed ({code})", fatal=True))
                break
            except Exception as e:  # noqa: BLE001 - any transport failure ends the session
                self._end(Unavailable(f"the WebSocket failed: {type(e).__name__}: {e}", fatal=True))
                break
            try:
                frame = frames.loads(raw)
            except ValueError:
                continue
            if not isinstance(frame, dict):
                continue
            rid = frame.get("id")
            out = self._by_id.pop(rid, None) if self.extended and rid is not None else None
            if out is None and not self.extended and self._fifo:
                out = self._fifo.popleft()
            if out is not None:
                return self._tr.decode(out, frame)
            if rid is None and frame.get("type") == "error":
                # the server ended the session (idle timeout, drain): fatal for what follows
                err = frames.error_from_frame(frame.get("data"))
                err.fatal = True
                self._end(err)
            # else: the late answer to a request that timed out: dropped
        if self._why is None:
            return None
        raise self._why

    async def end(self) -> None:
        """Close the socket (OpenEnv has no half-close): the server's ``close`` was sent, or
        the session is given up."""
        self._ending = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._ws.close(), 5)

    async def close(self) -> None:
        """Drop the socket when it is still open (no ``close`` frame, as a crashed client)."""
        if not self._ending:
            self._ending = True
            self._end(None)
            with contextlib.suppress(Exception):
                self._ws.transport.abort()


class WsDialer:
    """Opens :class:`WsChannel` sockets to ``url`` with ``options``; the first one tells
    whether the server is ours (``extended``)."""

    resumable = False  # OpenEnv's frames have no resumption
    coalesces = False  # nor pipelined messages

    def __init__(self, url: str, options: ConnectionOptions) -> None:
        self.url = self.info_key = url
        self.options = options
        self.ws_url, self.http_url = split_url(url)
        self.extended = False  #: True when the server is ours (correlation ids, complete frames)

    @property
    def answers_carry_ids(self) -> bool:
        """Our servers echo a frame's id; stock OpenEnv servers answer in order, without one."""
        return self.extended

    def _ssl(self) -> Any:
        cert, key = self.options.client_cert or (None, None)
        return client_ssl_context(self.options.ca_file, cert, key)

    async def dial(self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool) -> WsChannel:
        """Open the WebSocket (the server creates the session) and identify the server."""
        if handshake.num_envs > 1:
            raise Unimplemented("a vectorised session (num_envs > 1) needs a grpc:// URL", fatal=True)
        if handshake.HasField("world"):  # OpenEnv's JSON frames have no field for a join or an agent
            raise Unimplemented(
                "joining a world or choosing agents (join_token, agent_ids) needs a grpc:// or binary WebSocket "
                "URL: OpenEnv's JSON frames carry self-play sessions only (RFC 0012, Transports)",
                fatal=True,
            )
        connect = _require("websockets.asyncio.client").connect
        o = self.options
        url = self.ws_url
        query = [f"client_name={quote(handshake.client_name)}"]
        options = from_struct(handshake.options)
        if options:
            query.append("options=" + quote(frames.dumps(options)))
        url += ("&" if "?" in url else "?") + "&".join(query)
        kw: dict[str, Any] = {
            "open_timeout": timeout,
            "max_size": o.max_message_bytes,
            "ping_interval": o.keepalive_s or None,
            "ping_timeout": o.keepalive_timeout_s or None,
            "compression": None,
            "close_timeout": 5,
        }
        if is_loopback(url):
            kw["proxy"] = None
        # The token and the caller's trace context (the server's spans join it) as headers.
        headers = [("Authorization", f"Bearer {o.token}")] if o.token else []
        headers += tracing.inject()
        if headers:
            kw["additional_headers"] = headers
        if (o.ca_file or o.client_cert) and self.ws_url.startswith("wss://"):
            kw["ssl"] = self._ssl()
        try:
            ws = await connect(url, **kw)
        except (OSError, TimeoutError) as e:
            raise Unavailable(f"cannot connect to {self.ws_url}: {e}", fatal=True) from e
        except Exception as e:  # websockets' handshake errors (InvalidStatus, InvalidURI, ...)
            refused = _refusal(e)
            if refused is not None:
                raise refused from e
            raise Unavailable(f"cannot open a WebSocket to {self.ws_url}: {type(e).__name__}: {e}", fatal=True) from e
        try:
            with contextlib.suppress(Exception):  # refused (capacity): the error frame is already queued
                await ws.send(frames.dumps({**frames.HELLO, "id": 0}))
            hello = frames.parse_hello(await asyncio.wait_for(self._first_frame(ws), timeout))
            if hello is not None:
                self.extended = True
                session_id, info = hello
            else:
                session_id, info = "", await self._stock_info(timeout)
        except BaseException as e:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 5)
            if isinstance(e, TimeoutError):
                raise Unavailable(f"{self.ws_url} did not answer within {timeout:g} s", fatal=True) from None
            raise
        return WsChannel(ws, info, session_id, extended=self.extended, limit=o.max_message_bytes)

    @staticmethod
    async def _first_frame(ws: Any) -> dict[str, Any]:
        """The server's first frame (its answer to the hello): what does not parse is skipped;
        a socket closed first is ``UNAVAILABLE``."""
        closed = _require("websockets.exceptions").ConnectionClosed
        while True:
            try:
                raw = await ws.recv()
            except closed as e:
                code = e.rcvd.code if e.rcvd else "no close frame"
                raise Unavailable(f"the WebSocket closed ({code})", fatal=True) from None
            with contextlib.suppress(ValueError):
                frame = frames.loads(raw)
                if isinstance(frame, dict):
                    return frame

    async def _stock_info(self, timeout: float) -> environment_pb2.EnvironmentInfo:
        """Describe a stock OpenEnv server from ``/metadata`` and ``/schema`` (best effort)."""
        httpx = _require("httpx")
        o = self.options
        md = schema = None
        try:
            async with httpx.AsyncClient(
                timeout=timeout,
                trust_env=not is_loopback(self.http_url),
                headers={"Authorization": f"Bearer {o.token}"} if o.token else None,
                verify=self._ssl() if o.ca_file or o.client_cert else True,
            ) as http:
                md = (await http.get(self.http_url + "/metadata")).json()
                schema = (await http.get(self.http_url + "/schema")).json()
        except Exception:  # noqa: BLE001 - the description is optional; the session works without it
            pass
        return frames.info_from_stock(md, schema)


class WsConnection(ClientSession):
    """One session over a WebSocket; a :class:`~openenv.client.Connection`."""

    def __init__(
        self,
        base_url: str,
        *,
        options: ConnectionOptions | None = None,
        max_message_bytes: int | None = None,
        keepalive_s: float | None = None,
        ping_timeout_s: float | None = None,
        token: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        """``options``: the connection's settings (:class:`~openenv.client.ConnectionOptions`;
        ``keepalive_s`` is the ping interval, ``keepalive_timeout_s`` the ping timeout); the
        keywords replace its fields when given (``ping_timeout_s``: ``keepalive_timeout_s``)."""
        opts = (options or ConnectionOptions()).merged(
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            keepalive_timeout_s=ping_timeout_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        self._ws_dialer = WsDialer(base_url, opts)
        super().__init__(self._ws_dialer, opts)

    @property
    def extended(self) -> bool:
        """True when the server is ours (correlation ids, complete frames)."""
        return self._ws_dialer.extended

    @property
    def ws_url(self) -> str:
        return self._ws_dialer.ws_url

    @property
    def http_url(self) -> str:
        return self._ws_dialer.http_url

    @property
    def ping_timeout_s(self) -> float:
        return self.options.keepalive_timeout_s

    def sibling(self) -> WsConnection:
        """A new, unopened connection to the same server with the same settings."""
        return WsConnection(self.url, options=self.options)
