"""A connection with no socket: the session runs on a protocol :class:`~openenv.engine.Engine`
in this process, on this event loop (notebooks, fast unit tests; :mod:`openenv.testing`).

::

    conn = InProcessConnection(engine)                 # engine = Engine(SessionManager(Runtime(MyEnv)))
    async with EnvClient("inprocess://MyEnv", connection=conn) as env:
        await env.reset()

The client writes each request, serialized, on an in-memory stream (an asyncio queue) that
the engine reads as it reads a gRPC stream; the engine's answers come back serialized and are
matched by id. Every message is encoded and decoded as on the wire, so what the environment
receives and the client gets back is exactly what a socket would carry (payload codecs, size
limits, undecodable requests, the server's in-band refusal of an oversized reply): only the
socket and its framing are gone.

What you may rely on (the guarantees of :class:`~openenv.client.Connection`):

* requests get increasing ids, may be issued concurrently (they reach the engine in call
  order) and are answered by id, so a client-side timeout (``ClientTimeout``, a ``DeadlineExceeded``) never
  shifts a later answer;
* error answers are returned; a session the server ends (idle timeout, drain, a fatal error)
  sets ``ended``, fails what is pending and later, and calls the ``on_end`` callback once;
* ``close`` sends the close request and waits for the engine to finish the stream, so the
  session is closed (its environment too) when it returns; ``abort`` drops the stream as a
  crashed client would (the server keeps a resumable session for its grace period);
* tokens: when the engine requires one, the options' ``token`` is checked as a transport
  checks the ``authorization`` header (a missing or refused one raises ``Unauthenticated``).

It never drops, so it never resumes; requests are not coalesced into pipelined messages
(RFC 0009: that saves messages on a wire, and there is none). Everything runs on the
caller's event loop: the connection must be opened, used and closed on one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import NoReturn

from openenv.client.infocache import info_of, known_digest
from openenv.client.options import ConnectionOptions
from openenv.engine import Engine, Incoming, bounded_serializer, tolerant_parse
from openenv.errors import (
    ClientTimeout,
    EnvError,
    ErrorCode,
    FailedPrecondition,
    Internal,
    ResourceExhausted,
    Unauthenticated,
)
from openenv.v1 import environment_pb2, multiagent_pb2

__all__ = ["InProcessConnection"]

END_GRACE_S = 5.0  # how long closing waits for the engine to end the stream before cancelling it


class _Aborted(Exception):
    """Raised by the stream's ``abort`` (as grpc.aio's context raises): unwinds ``Engine.serve``."""


class _ServerStream:
    """The engine's end of the in-memory stream (an :class:`openenv.engine.Stream`)."""

    def __init__(self, owner: InProcessConnection, peer: str, metadata: Sequence[tuple[str, str]]) -> None:
        self._owner = owner
        self._peer, self._metadata = peer, tuple(metadata)
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        # As the gRPC listeners read: bytes that do not parse, or are too fine-grained to
        # parse, become Undecodable (answered in band, RFC 0003).
        self._parse = tolerant_parse(
            environment_pb2.SessionRequest.FromString, environment_pb2.SessionRequest.DESCRIPTOR
        )
        self._serialize = bounded_serializer(owner.engine.runtime.max_message_bytes)
        self.aborted: EnvError | None = None

    async def read(self) -> Incoming:
        data = await self.inbox.get()
        return None if data is None else self._parse(data)

    async def write(self, response: environment_pb2.SessionResponse) -> None:
        self._owner._receive(self._serialize(response))

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        self.aborted = EnvError.from_code(int(code), message, fatal=True)
        raise _Aborted(message)

    def peer(self) -> str:
        return self._peer

    def metadata(self) -> Sequence[tuple[str, str]]:
        return self._metadata


class InProcessConnection:
    """One session on an in-process :class:`~openenv.engine.Engine`; a
    :class:`~openenv.client.Connection` (see the module docstring).

    ``options``: :class:`~openenv.client.ConnectionOptions` (``max_message_bytes`` and
    ``token`` apply; keepalive and TLS have nothing to act on); ``max_message_bytes`` and
    ``token`` replace its fields when given. ``peer``: the client address the server counts
    sessions by (``max_sessions_per_client``)."""

    def __init__(
        self,
        engine: Engine,
        *,
        options: ConnectionOptions | None = None,
        max_message_bytes: int | None = None,
        token: str | None = None,
        peer: str = "inprocess",
    ) -> None:
        self.engine = engine
        self.options = (options or ConnectionOptions()).merged(max_message_bytes=max_message_bytes, token=token)
        self.peer = peer
        self.url = f"inprocess://{engine.runtime.env_cls.__name__}"
        self.session_id = ""
        self.info = environment_pb2.EnvironmentInfo()
        self.world = multiagent_pb2.WorldInfo()
        self.max_message_bytes = self.options.max_message_bytes
        self.resume_token = ""
        self._stream: _ServerStream | None = None
        self._server: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[environment_pb2.SessionResponse]] = {}
        self._next_id = 0
        self._ended: EnvError | None = None
        self._on_end: Callable[[EnvError], None] | None = None
        self._closing = False

    @property
    def ended(self) -> EnvError | None:
        return self._ended

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self._on_end = callback

    def sibling(self) -> InProcessConnection:
        """A new, unopened connection to the same engine with the same settings (forks)."""
        return InProcessConnection(self.engine, options=self.options, peer=self.peer)

    # ------------------------------------------------------------------ lifecycle

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
        token = self.options.token
        authorization = f"Bearer {token}" if token else None
        refusal = self.engine.refusal(authorization)  # what a listener checks before the engine sees the stream
        if refusal is not None:
            raise Unauthenticated(refusal, fatal=True)
        metadata = [("authorization", authorization)] if authorization else []
        self._stream = _ServerStream(self, self.peer, metadata)
        self._server = asyncio.ensure_future(self._serve(self._stream))
        key = f"in-process:{id(self.engine)}"
        if not handshake.known_info_digest:  # the description this process holds (RFC 0013)
            handshake.known_info_digest = known_digest(key)
        try:
            resp = await self.request(environment_pb2.SessionRequest(handshake=handshake), timeout)
        except BaseException:
            await self._shutdown(graceful=False)
            raise
        if resp.WhichOneof("kind") == "error":
            await self._shutdown(graceful=True)  # a refused handshake: the engine ends the stream
            err = EnvError.from_proto(resp.error)
            err.fatal = True
            raise err
        self.session_id = resp.handshake.session_id
        self.info = info_of(key, resp.handshake)
        self.world = resp.handshake.world  # RFC 0012: the world of a multi-agent session
        self.resume_token = resp.handshake.resume_token
        server_limit = self.info.capabilities.max_message_bytes
        limit = self.options.max_message_bytes
        self.max_message_bytes = min(limit, server_limit) if server_limit else limit

    async def _serve(self, stream: _ServerStream) -> None:
        """The engine's side: serve the stream to its end, then end the session here with why."""
        err: EnvError | None = None
        try:
            await self.engine.serve(stream)
        except _Aborted:
            err = stream.aborted
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
            self._end(err)
            raise
        except Exception as e:  # noqa: BLE001 - the engine never raises for a client's input: a bug, reported as one
            err = Internal(f"the engine failed: {type(e).__name__}: {e}", fatal=True)
        self._end(err)

    async def close(self) -> None:
        """Close request, then wait for the engine to end the stream (the session is closed)."""
        self._closing = True
        if self._server is not None and self._ended is None:
            with contextlib.suppress(EnvError):
                await self.request(environment_pb2.SessionRequest(close=environment_pb2.CloseRequest()), 10.0)
        await self._shutdown(graceful=True)

    async def abort(self) -> None:
        """Drop the stream without a close request, as a crashed client would."""
        self._closing = True
        await self._shutdown(graceful=False)

    async def _shutdown(self, graceful: bool) -> None:
        """End the stream: ``graceful``, end of input and let the engine finish (bounded);
        else (or past the bound) cancel it, as a dropped connection cancels a gRPC handler."""
        server, stream = self._server, self._stream
        if server is not None and not server.done():
            if graceful and stream is not None:
                stream.inbox.put_nowait(None)
                await asyncio.wait({server}, timeout=END_GRACE_S)
            server.cancel()
        if server is not None:
            await asyncio.gather(server, return_exceptions=True)
        self._server = self._stream = None
        if self._ended is None:
            self._ended = FailedPrecondition("the client is closed", fatal=True)

    # ------------------------------------------------------------------ requests

    def _receive(self, data: bytes) -> None:
        """An answer from the engine, as bytes: matched to its request by id."""
        if len(data) > self.options.max_message_bytes:
            # What a gRPC client does with a message over its receive limit: the stream fails.
            self._end(
                ResourceExhausted(
                    f"an answer of {len(data)} bytes exceeds this client's {self.options.max_message_bytes}-byte limit",
                    fatal=True,
                )
            )
            if self._server is not None:
                self._server.cancel()
            return
        resp = environment_pb2.SessionResponse.FromString(data)
        fut = self._pending.pop(resp.request_id, None)
        if fut is not None and not fut.done():
            fut.set_result(resp)
        # else: the answer to a request whose caller stopped waiting (a client-side timeout)

    def _end(self, err: EnvError | None) -> None:
        """The session is over: fail what is pending, tell the owner (once)."""
        if self._ended is not None:
            return
        self._ended = err or FailedPrecondition("the session has ended", fatal=True)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._ended)
        self._pending.clear()
        if not self._closing and self._on_end is not None:
            self._on_end(self._ended)

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        if self._ended is not None:
            raise self._ended
        stream = self._stream
        if stream is None:
            raise FailedPrecondition("not connected: use `async with` or await connect()")
        size = req.ByteSize()
        if size > self.max_message_bytes:
            raise ResourceExhausted(f"request of {size} bytes exceeds the {self.max_message_bytes}-byte message limit")
        self._next_id += 1
        rid = req.request_id = self._next_id
        fut: asyncio.Future[environment_pb2.SessionResponse] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        stream.inbox.put_nowait(req.SerializeToString())  # in call order: put_nowait never waits
        try:
            return await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except TimeoutError:
            self._pending.pop(rid, None)  # its late answer will be matched and discarded
            raise ClientTimeout(f"no answer within {timeout:g} s (client-side timeout)") from None
