"""OpenEnv's WebSocket protocol as a client transport: a session on ``/ws``.

``EnvClient("http://host:8000")`` (or ``https://``, ``ws://``, ``wss://``) uses this
connection instead of gRPC. Each protocol request becomes an OpenEnv frame and each reply
frame the protocol's answer (:class:`openenv.json_protocol.frames.FrameTranslator`), so everything
above it works unchanged. It speaks to:

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
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from openenv.client.options import ConnectionOptions
from openenv.client.urls import is_loopback, split_url
from openenv.errors import (
    ClientTimeout,
    EnvError,
    FailedPrecondition,
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

__all__ = ["WsConnection"]


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


class WsConnection:
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
        self.url = base_url
        self.options = (options or ConnectionOptions()).merged(
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            keepalive_timeout_s=ping_timeout_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        self.ws_url, self.http_url = split_url(base_url)
        self.max_message_bytes = self.options.max_message_bytes
        self.extended = False  #: True when the server is ours (correlation ids, complete frames)
        self.session_id = ""
        self.info = environment_pb2.EnvironmentInfo()
        self._tr: FrameTranslator | None = None
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._by_id: dict[int, asyncio.Future[Any]] = {}
        self._fifo: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._next_id = 0
        self._ended: EnvError | None = None
        self._closer: asyncio.Task[None] | None = None
        self._on_end: Callable[[EnvError], None] | None = None
        self._closing = False

    # The settings, read from the options (one place; the old attribute names still read).
    @property
    def token(self) -> str | None:
        return self.options.token

    @property
    def ca_file(self) -> str | None:
        return self.options.ca_file

    @property
    def client_cert(self) -> tuple[str, str] | None:
        return self.options.client_cert

    @property
    def keepalive_s(self) -> float:
        return self.options.keepalive_s

    @property
    def ping_timeout_s(self) -> float:
        return self.options.keepalive_timeout_s

    @property
    def ended(self) -> EnvError | None:
        return self._ended

    def sibling(self) -> WsConnection:
        """A new, unopened connection to the same server with the same settings."""
        return type(self)(self.url, options=self.options)

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self._on_end = callback

    # ------------------------------------------------------------------ lifecycle

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
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
        url = self.ws_url
        query = [f"client_name={quote(handshake.client_name)}"]
        options = from_struct(handshake.options)
        if options:
            query.append("options=" + quote(frames.dumps(options)))
        url += ("&" if "?" in url else "?") + "&".join(query)
        kw: dict[str, Any] = {
            "open_timeout": timeout,
            "max_size": self.max_message_bytes,
            "ping_interval": self.keepalive_s or None,
            "ping_timeout": self.ping_timeout_s or None,
            "compression": None,
            "close_timeout": 5,
        }
        if is_loopback(url):
            kw["proxy"] = None
        # The token and the caller's trace context (the server's spans join it) as headers.
        headers = [("Authorization", f"Bearer {self.token}")] if self.token else []
        headers += tracing.inject()
        if headers:
            kw["additional_headers"] = headers
        if (self.ca_file or self.client_cert) and self.ws_url.startswith("wss://"):
            kw["ssl"] = self._ssl()
        try:
            self._ws = await connect(url, **kw)
        except (OSError, TimeoutError) as e:
            raise Unavailable(f"cannot connect to {self.ws_url}: {e}", fatal=True) from e
        except Exception as e:  # websockets' handshake errors (InvalidStatus, InvalidURI, ...)
            refused = _refusal(e)
            if refused is not None:
                raise refused from e
            raise Unavailable(f"cannot open a WebSocket to {self.ws_url}: {type(e).__name__}: {e}", fatal=True) from e
        self._reader = asyncio.ensure_future(self._read_loop())
        try:
            fut = self._expect(None)
            with contextlib.suppress(Exception):  # refused (capacity): the error frame is already queued
                await self._ws.send(frames.dumps({**frames.HELLO, "id": 0}))
            hello = frames.parse_hello(await asyncio.wait_for(fut, timeout))
            if hello is not None:
                self.extended = True
                self.session_id, self.info = hello
            else:
                self.info = await self._stock_info(timeout)
        except TimeoutError:
            await self.close()
            raise Unavailable(f"{self.ws_url} did not answer within {timeout:g} s", fatal=True) from None
        except BaseException:
            await self.close()
            raise
        self._tr = FrameTranslator(self.info, extended=self.extended)

    def _ssl(self) -> Any:
        cert, key = self.client_cert or (None, None)
        return client_ssl_context(self.ca_file, cert, key)

    async def _stock_info(self, timeout: float) -> environment_pb2.EnvironmentInfo:
        """Describe a stock OpenEnv server from ``/metadata`` and ``/schema`` (best effort)."""
        httpx = _require("httpx")
        md = schema = None
        try:
            async with httpx.AsyncClient(
                timeout=timeout,
                trust_env=not is_loopback(self.http_url),
                headers={"Authorization": f"Bearer {self.token}"} if self.token else None,
                verify=self._ssl() if self.ca_file or self.client_cert else True,
            ) as http:
                md = (await http.get(self.http_url + "/metadata")).json()
                schema = (await http.get(self.http_url + "/schema")).json()
        except Exception:  # noqa: BLE001 - the description is optional; the session works without it
            pass
        return frames.info_from_stock(md, schema)

    async def close(self) -> None:
        """Send OpenEnv's ``close`` (no reply) and close the socket."""
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None and self._ended is None:
            with contextlib.suppress(Exception):
                await ws.send('{"type":"close"}')
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 5)
        if self._closer is not None:
            await asyncio.gather(self._closer, return_exceptions=True)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        self._fail(FailedPrecondition("the client is closed", fatal=True))

    async def abort(self) -> None:
        """Drop the socket without OpenEnv's ``close`` frame."""
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.transport.abort()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        self._fail(FailedPrecondition("the client is closed", fatal=True))

    # ------------------------------------------------------------------ wire

    def _expect(self, rid: int | None) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if rid is None:
            self._fifo.append(fut)
        else:
            self._by_id[rid] = fut
        return fut

    def _fail(self, err: EnvError) -> None:
        ended = self._ended
        first = ended is None
        if ended is None:
            ended = self._ended = err
        for fut in [*self._by_id.values(), *self._fifo]:
            if not fut.done():
                fut.set_exception(ended)
        self._by_id.clear()
        self._fifo.clear()
        if first and not self._closing and self._on_end is not None:
            self._on_end(err)

    async def _read_loop(self) -> None:
        closed = _require("websockets.exceptions").ConnectionClosed
        err: EnvError | None = None
        try:
            async for raw in self._ws:
                try:
                    frame = frames.loads(raw)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                rid = frame.get("id")
                if rid is not None and rid in self._by_id:
                    fut = self._by_id.pop(rid)
                elif self._fifo:
                    fut = self._fifo.popleft()
                elif rid is None and frame.get("type") == "error":
                    # the server ended the session (idle timeout, drain): fatal for what follows
                    e = frames.error_from_frame(frame.get("data"))
                    e.fatal = True
                    self._fail(e)
                    continue
                else:
                    continue  # the late answer to a request that timed out: dropped
                if not fut.done():
                    fut.set_result(frame)
        except closed as e:
            err = Unavailable(f"the WebSocket closed ({e.rcvd.code if e.rcvd else 'no close frame'})", fatal=True)
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
        except Exception as e:  # noqa: BLE001 - any transport failure ends the session
            err = Unavailable(f"the WebSocket failed: {type(e).__name__}: {e}", fatal=True)
        finally:
            self._fail(err or Unavailable("the server closed the session", fatal=True))

    def _drop(self, why: EnvError) -> None:
        """Stock servers: abandon the connection so that no reply can shift (#1143)."""
        self._fail(why)
        ws, self._ws = self._ws, None
        if ws is not None:
            self._closer = asyncio.ensure_future(ws.close())

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        if self._ended is not None:
            raise self._ended
        if self._ws is None or self._tr is None:
            raise FailedPrecondition("not connected: use `async with` or await connect()")
        out: Outgoing = self._tr.encode(req)
        frame = out.frame
        rid: int | None = None
        if self.extended:
            self._next_id += 1
            rid = frame["id"] = self._next_id
        text = frames.dumps(frame)
        if len(text) > self.max_message_bytes:
            raise ResourceExhausted(f"request of {len(text)} bytes exceeds the {self.max_message_bytes}-byte limit")
        fut = self._expect(rid) if out.reply else None
        try:
            await self._ws.send(text)
        except Exception as e:  # the connection is gone
            if rid is not None:
                self._by_id.pop(rid, None)
            if self._ended is not None:
                raise self._ended from None
            raise Unavailable(f"the WebSocket failed: {e}", fatal=True) from e
        if fut is None:
            resp = environment_pb2.SessionResponse(request_id=req.request_id)
            resp.close.SetInParent()
            return resp
        try:
            reply = await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except TimeoutError:
            if rid is not None:
                self._by_id.pop(rid, None)  # its late answer will be dropped
                raise ClientTimeout(f"no answer within {timeout:g} s (client-side timeout)") from None
            err = ClientTimeout(
                f"no answer within {timeout:g} s (client-side timeout); the connection was dropped so that a "
                "late answer cannot be taken for the next one (stock OpenEnv frames carry no request id)",
                fatal=True,
            )
            self._drop(err)
            raise err from None
        return self._tr.decode(out, reply)
