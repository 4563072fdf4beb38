"""A connection with no socket: the session runs on a protocol :class:`~openenv.engine.Engine`
in this process, on this event loop (notebooks, fast unit tests; :mod:`openenv.testing`).

::

    conn = InProcessConnection(engine)                 # engine = Engine(SessionManager(Runtime(MyEnv)))
    async with EnvClient("inprocess://MyEnv", connection=conn) as env:
        await env.reset()

The client writes each request, serialized, on an in-memory stream (an asyncio queue) that
the engine reads as it reads a gRPC stream; the engine's answers come back serialized. It is a
:class:`~openenv.client.session.ClientSession` (ids and matching as on every transport) over
an :class:`InProcessChannel`. Every message is encoded and decoded as on the wire, so what the environment
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
import collections
from collections.abc import Sequence
from typing import Any, NoReturn

from openenv.client.options import ConnectionOptions
from openenv.client.session import ClientSession
from openenv.engine import Engine, Incoming, bounded_serializer, tolerant_parse
from openenv.errors import (
    EnvError,
    ErrorCode,
    FailedPrecondition,
    Internal,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from openenv.v1 import environment_pb2

__all__ = ["InProcessChannel", "InProcessConnection", "InProcessDialer"]


class _Aborted(Exception):
    """Raised by the stream's ``abort`` (as grpc.aio's context raises): unwinds ``Engine.serve``."""


class _End:
    """The end of the engine's answers: ``err`` says why (None: the engine ended the stream)."""

    __slots__ = ("err",)

    def __init__(self, err: EnvError | None) -> None:
        self.err = err


class _ServerStream:
    """The engine's end of the in-memory stream (an :class:`openenv.engine.Stream`)."""

    encode_result = None  # the engine encodes results as protobuf
    relayed = False  # a client's own stream (not relayed by a sibling worker)

    def __init__(self, channel: InProcessChannel, peer: str, metadata: Sequence[tuple[str, str]]) -> None:
        self._channel = channel
        self._peer, self._metadata = peer, tuple(metadata)
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        # As the gRPC listeners read: bytes that do not parse, or are too fine-grained to
        # parse, become Undecodable (answered in band, RFC 0003).
        self._parse = tolerant_parse(
            environment_pb2.SessionRequest.FromString, environment_pb2.SessionRequest.DESCRIPTOR
        )
        self._serialize = bounded_serializer(channel.engine.runtime.max_message_bytes)
        self.aborted: EnvError | None = None

    async def read(self) -> Incoming:
        data = await self.inbox.get()
        return None if data is None else self._parse(data)

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        self._channel._push(self._serialize(response))

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        self.aborted = EnvError.from_code(int(code), message, fatal=True)
        raise _Aborted(message)

    def peer(self) -> str:
        return self._peer

    def metadata(self) -> Sequence[tuple[str, str]]:
        return self._metadata


class InProcessChannel:
    """One stream served by ``engine`` on this event loop; a :class:`~openenv.client.channel.Channel`.
    Answers over ``limit`` bytes end it, as a gRPC client's receive limit does."""

    def __init__(self, engine: Engine, peer: str, metadata: Sequence[tuple[str, str]], limit: int) -> None:
        self.engine = engine
        self._limit = limit
        self._answers: collections.deque[bytes | _End] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._stream = _ServerStream(self, peer, metadata)
        self._over: _End | None = None  # set once the engine's answers are over
        self._server = asyncio.ensure_future(self._serve())

    async def _serve(self) -> None:
        """The engine's side: serve the stream to its end, then say why it ended."""
        err: EnvError | None = None
        try:
            await self.engine.serve(self._stream)
        except _Aborted:
            err = self._stream.aborted
        except asyncio.CancelledError:
            self._push(_End(FailedPrecondition("the client is closed", fatal=True)))
            raise
        except Exception as e:  # noqa: BLE001 - the engine never raises for a client's input: a bug, reported as one
            err = Internal(f"the engine failed: {type(e).__name__}: {e}", fatal=True)
        self._push(_End(err))

    def _push(self, item: bytes | _End) -> None:
        self._answers.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def send(self, request: environment_pb2.SessionRequest) -> None:
        if self._over is not None or self._server.done():
            raise (self._over.err if self._over is not None else None) or Unavailable("the stream is over", fatal=True)
        self._stream.inbox.put_nowait(request.SerializeToString())  # in call order: never waits

    async def receive(self) -> environment_pb2.SessionResponse | None:
        while self._over is None:
            answers = self._answers
            if not answers:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
                continue
            item = answers.popleft()
            if isinstance(item, _End):
                self._over = item
                break
            if len(item) > self._limit:
                # What a gRPC client does with a message over its receive limit: the stream fails.
                self._over = _End(
                    ResourceExhausted(
                        f"an answer of {len(item)} bytes exceeds this client's {self._limit}-byte limit", fatal=True
                    )
                )
                self._server.cancel()
                break
            return environment_pb2.SessionResponse.FromString(item)
        if self._over.err is None:
            return None
        raise self._over.err

    async def end(self) -> None:
        self._stream.inbox.put_nowait(None)  # the end of input: the engine finishes the stream

    async def close(self) -> None:
        """Cancel the engine's side when it is still serving (as a dropped connection cancels a
        gRPC handler) and wait for it."""
        if not self._server.done():
            self._server.cancel()
        await asyncio.gather(self._server, return_exceptions=True)


class InProcessDialer:
    """Opens :class:`InProcessChannel` streams on ``engine`` (the token checked as a listener
    checks the ``authorization`` header)."""

    resumable = False  # an in-memory stream never drops
    coalesces = False  # no wire to save messages on
    answers_carry_ids = True

    def __init__(self, engine: Engine, options: ConnectionOptions, peer: str) -> None:
        self.engine, self.options, self.peer = engine, options, peer
        self.url = f"inprocess://{engine.runtime.env_cls.__name__}"
        self.info_key = f"in-process:{id(engine)}"

    async def dial(
        self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool
    ) -> InProcessChannel:
        token = self.options.token
        authorization = f"Bearer {token}" if token else None
        refusal = self.engine.refusal(authorization)  # what a listener checks before the engine sees the stream
        if refusal is not None:
            raise Unauthenticated(refusal, fatal=True)
        metadata = [("authorization", authorization)] if authorization else []
        return InProcessChannel(self.engine, self.peer, metadata, self.options.max_message_bytes)


class InProcessConnection(ClientSession):
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
        opts = (options or ConnectionOptions()).merged(max_message_bytes=max_message_bytes, token=token)
        super().__init__(InProcessDialer(engine, opts, peer), opts)
        self.engine = engine
        self.peer = peer

    def sibling(self) -> InProcessConnection:
        """A new, unopened connection to the same engine with the same settings (forks)."""
        return InProcessConnection(self.engine, options=self.options, peer=self.peer)
