"""The binary WebSocket transport (RFC 0011): ``ws(s)://HOST:PORT/v1/session``, driven synchronously.

The same ``SessionRequest`` / ``SessionResponse`` messages as the gRPC ``Session`` stream, one
per binary WebSocket message (subprotocol ``openenv.v1+proto``), so every check of the gRPC
wire can be expressed over it: request ids, pipelining, raw bytes, half-close (the empty
message), handshake requests and versions, vectorised sessions. What gRPC carries beside the
stream comes from the same HTTP listener: ``GetInfo`` is ``GET /openenv/info``, ``GetLoad``
``GET /load``, health ``GET /health`` (SERVING while 200). Server reflection is a gRPC service:
its check is skipped with that reason.

A "channel" here is a token the checks pass around (gRPC multiplexes sessions on one
connection; every binary session is a WebSocket of its own): closing one drops the sockets of
the sessions opened with it, abruptly. How a socket ends is reported as a stream's status
(:mod:`openenv.client.binary`): close 1000 is OK, ``4000 + code`` the server's status, 1009
``RESOURCE_EXHAUSTED``, a lost connection ``UNAVAILABLE``; a refused upgrade is the status of
its HTTP answer (401 ``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
from google.protobuf import json_format

from openenv.client.binary import close_error
from openenv.client.urls import BINARY_PATH, BINARY_SUBPROTOCOL, is_loopback
from openenv.json_protocol.payloads import parse_info
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import load_pb2
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.transport.base import NoAnswer, RequestBuilder, StreamEnd, refusal, rpc_error
from openenv_conformance.transport.grpc import Wire, _thread_loop

_STATUS = {c.value[0]: c for c in grpc.StatusCode}  # the client's errors carry the codes' numbers

__all__ = ["BinarySession", "BinaryWire", "Channel"]


class Channel:
    """The sessions opened "on a connection" (see the module docstring)."""

    def __init__(self, anonymous: bool = False) -> None:
        self.anonymous = anonymous
        self.sessions: list[BinarySession] = []


class BinaryWire(Wire):
    """Sessions and the unary calls' HTTP twins of one target (``ws://host:port/v1/session``).
    Every blocking call is bounded by ``timeout``; use from one thread."""

    kind = "binary"

    def __init__(self, url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        u = urlsplit(url)
        scheme = {"http": "ws", "https": "wss"}.get(u.scheme.lower(), u.scheme.lower())
        if scheme not in ("ws", "wss") or not u.path.rstrip("/").endswith(BINARY_PATH):
            raise ValueError(f"{url!r}: the binary wire speaks ws(s)://HOST:PORT/v1/session only")
        self.url = urlunsplit((scheme, u.netloc, u.path.rstrip("/"), u.query, ""))
        prefix = u.path.rstrip("/")[: -len(BINARY_PATH)]
        self.http_url = urlunsplit(("https" if scheme == "wss" else "http", u.netloc, prefix, "", ""))
        self.address = u.netloc
        self.token, self.timeout = token, timeout
        self.loop = _thread_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.sessions: list[BinarySession] = []  # type: ignore[assignment]
        self.channel = Channel()

    # -- plumbing

    def new_channel(self, *, anonymous: bool = False) -> Any:
        return Channel(anonymous)

    def close_channel(self, channel: Any) -> None:
        for s in list(channel.sessions):
            s.cancel()

    def close(self) -> None:
        for s in list(self.sessions):
            s.cancel()
        pending = [t for t in self._tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending, timeout=5))

    def _get(self, path: str, timeout: float | None) -> tuple[int, bytes]:
        t = self.timeout if timeout is None else timeout
        req = urllib.request.Request(self.http_url + path)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(self.http_url) else []
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=t) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()
        except TimeoutError:
            raise NoAnswer(f"no answer to GET {path} within {t:g} s") from None
        except OSError as e:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"GET {path}: {e}") from None

    # -- unary calls (their HTTP twins on the same listener)

    def get_info(self, timeout: float | None = None) -> pb.EnvironmentInfo:
        status, body = self._get("/openenv/info", timeout)
        if status != 200:
            raise refusal(status, "GET /openenv/info") or rpc_error(
                grpc.StatusCode.UNAVAILABLE, f"GET /openenv/info answered {status}"
            )
        # As the HTTP transport reads it: the advertised descriptors first, Anys canonical.
        return parse_info(json.loads(body))

    def get_load(self, timeout: float | None = None) -> load_pb2.ServerLoad:
        status, body = self._get("/load", timeout)
        if status != 200:
            code = grpc.StatusCode.UNIMPLEMENTED if status == 404 else grpc.StatusCode.UNAVAILABLE
            raise rpc_error(code, f"GET /load answered {status}")
        return json_format.ParseDict(json.loads(body), load_pb2.ServerLoad(), ignore_unknown_fields=True)

    def health(self, service: str = "", timeout: float | None = None) -> str:
        try:
            status, _ = self._get("/health", timeout)
        except grpc.aio.AioRpcError as e:
            return f"<{e.code().name}>"
        return "SERVING" if status == 200 else "NOT_SERVING"

    def reflection(self, symbol: str = "") -> tuple[list[str], list[bytes]]:
        raise CheckSkipped("server reflection is a gRPC service: the binary WebSocket transport has none")

    # -- sessions

    def session(self, channel: Any = None) -> BinarySession:  # type: ignore[override]
        ch = channel or self.channel
        s = BinarySession(self, ch)
        self.sessions.append(s)
        ch.sessions.append(s)
        return s


class BinarySession(RequestBuilder):
    """One session: a WebSocket of its own. Requests get increasing ids unless given one."""

    def __init__(self, wire: BinaryWire, channel: Channel) -> None:
        super().__init__()
        self.wire, self.channel = wire, channel
        self._queue: asyncio.Queue[pb.SessionResponse | StreamEnd] = asyncio.Queue()
        self._ws: Any = None
        self._connected: asyncio.Future[Any] = wire.loop.create_future()
        self._reader = wire.loop.create_task(self._run())
        wire._tasks.add(self._reader)
        self._reader.add_done_callback(wire._tasks.discard)

    async def _run(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        kw: dict[str, Any] = {"subprotocols": [BINARY_SUBPROTOCOL], "max_size": None, "compression": None}
        if self.wire.token and not self.channel.anonymous:
            kw["additional_headers"] = [("Authorization", f"Bearer {self.wire.token}")]
        if is_loopback(self.wire.url):
            kw["proxy"] = None
        try:
            try:
                self._ws = await connect(self.wire.url, open_timeout=self.wire.timeout, **kw)
            except InvalidStatus as e:
                status = e.response.status_code
                code = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}.get(
                    status, grpc.StatusCode.UNAVAILABLE
                )
                end = StreamEnd(code, f"the upgrade was refused ({status})")
                self._connected.set_result(None)
                self._queue.put_nowait(end)
                return
            except (OSError, TimeoutError) as e:
                self._connected.set_result(None)
                self._queue.put_nowait(StreamEnd(grpc.StatusCode.UNAVAILABLE, f"cannot connect: {e}"))
                return
            self._connected.set_result(self._ws)
            while True:
                data = await self._ws.recv()
                if isinstance(data, str):
                    end = StreamEnd(grpc.StatusCode.INTERNAL, "the server sent a text message")
                    break
                self._queue.put_nowait(pb.SessionResponse.FromString(data))
        except ConnectionClosed as e:
            rcvd = e.rcvd
            reason = rcvd.reason if rcvd is not None else ""
            err = close_error(rcvd.code if rcvd is not None else None, reason)
            end = (
                StreamEnd(grpc.StatusCode.OK, reason)
                if err is None
                else StreamEnd(_STATUS.get(int(err.code), grpc.StatusCode.UNKNOWN), err.message)
            )
        except asyncio.CancelledError:
            end = StreamEnd(grpc.StatusCode.CANCELLED, "cancelled by the client")
        except Exception as e:  # noqa: BLE001 - e.g. an answer that does not decode
            end = StreamEnd(grpc.StatusCode.UNKNOWN, f"{type(e).__name__}: {e}")
        if not self._connected.done():
            self._connected.set_result(None)
        self._queue.put_nowait(end)

    def _socket(self) -> Any:
        return self.wire.run(asyncio.shield(self._connected), what="the WebSocket upgrade")

    # -- raw operations

    def send(self, request: pb.SessionRequest | bytes) -> bool:
        """Write one request (or raw bytes); False when the socket no longer accepts writes."""
        ws = self._socket()
        if ws is None:
            return False
        data = bytes(request) if isinstance(request, (bytes, bytearray)) else request.SerializeToString()
        try:
            self.wire.run(ws.send(data), what="a write")
        except Exception:  # noqa: BLE001 - closed: the end is read by recv
            return False
        return True

    def recv(self, timeout: float | None = None) -> pb.SessionResponse | StreamEnd:
        item = self.wire.run(self._queue.get(), timeout, what="a request on the session")
        self.received_at = time.monotonic()
        if isinstance(item, StreamEnd):
            self.end = item
            self._queue.put_nowait(item)
        return item

    def half_close(self) -> None:
        """No more requests: the transport's empty message."""
        ws = self._socket()
        if ws is not None:
            try:
                self.wire.run(ws.send(b""), what="half-close")
            except Exception:  # noqa: BLE001 - already over
                pass

    def cancel(self) -> None:
        """Drop the socket abruptly (no close frame)."""
        ws = self._ws
        if ws is not None and ws.transport is not None:
            ws.transport.abort()
        elif not self._reader.done():
            self._reader.cancel()
        if self in self.wire.sessions:
            self.wire.sessions.remove(self)
        if self in self.channel.sessions:
            self.channel.sessions.remove(self)

    def wait_end(self, timeout: float | None = None) -> tuple[StreamEnd, list[pb.SessionResponse]]:
        extra: list[pb.SessionResponse] = []
        t = self.wire.timeout if timeout is None else timeout
        deadline = self.wire.loop.time() + t
        while True:
            left = deadline - self.wire.loop.time()
            if left <= 0:
                raise NoAnswer(f"the stream did not end within {t:g} s")
            item = self.recv(left)
            if isinstance(item, StreamEnd):
                return item, extra
            extra.append(item)

    def shutdown(self, timeout: float = 3.0) -> None:
        try:
            if self.end is None:
                if self.opened:
                    self.send(self.request(close=pb.CloseRequest()))
                self.half_close()
                self.wait_end(timeout)
        except Violation:
            pass
        finally:
            self.cancel()
