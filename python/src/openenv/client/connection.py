"""The transport seam of the client: a :class:`Connection` carries one session.

A connection turns protocol requests (``openenv.v1.SessionRequest``) into answers
(``SessionResponse``), whatever the wire. Every transport of this package is one
implementation, :class:`~openenv.client.session.ClientSession`, over the transport's
:class:`~openenv.client.channel.Channel`: :class:`~openenv.client.grpc.GrpcConnection` (the
protocol's gRPC ``Session`` stream; on grpclib, :class:`~openenv.client.grpclib.GrpclibConnection`),
:class:`~openenv.client.binary.BinaryWsConnection` (the binary WebSocket),
:class:`~openenv.client.ws.WsConnection` (OpenEnv's JSON frames on ``/ws``, translated) and
:class:`~openenv.client.inprocess.InProcessConnection` (an engine in this process).
:class:`~openenv.EnvClient` is written against this interface only; so is the bridge's remote
backend. python/tests/test_client_seam.py holds every transport to the guarantees below.

What implementations guarantee:

* ``request`` assigns the request id, may be called concurrently (pipelining: requests
  are sent in call order) and returns the answer matched to its id, so a call that times
  out (``DeadlineExceeded``, raised) never shifts later answers;
* error answers of the protocol are *returned* (``resp.error``), failures of the transport
  are *raised* as fatal :class:`~openenv.EnvError` (``UNAVAILABLE``, ...);
* once the session is over, ``ended`` holds why, every pending and later request raises it,
  and the callback given to ``on_end`` has been called once;
* ``close`` ends the session the way the protocol does and releases everything the
  connection holds before it returns (nothing is left owed to the event loop).

Optionally, a connection has ``options`` (its :class:`~openenv.client.ConnectionOptions`) and
``sibling()``: a new, unopened connection to the same server with the same settings, which
:meth:`openenv.EnvClient.fork` opens for each fork (without it, forks connect to the client's URL).

Behaviour is composed by wrapping a connection, not by subclassing clients:
:class:`ConnectionWrapper` delegates everything to the connection it wraps (a decorator
overrides what it changes) and :class:`MapErrors` rewrites the errors a transport raises (a
fleet names the lost server in them: :class:`openenv.fleet.FleetClient`). What a client owns
besides its connection (a container) is given to :meth:`openenv.EnvClient.own`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from openenv.errors import EnvError
from openenv.v1 import environment_pb2

__all__ = ["Connection", "ConnectionWrapper", "MapErrors"]


@runtime_checkable
class Connection(Protocol):
    """One session over some transport; see the module docstring."""

    #: The session id the server gave (empty for stock OpenEnv servers).
    session_id: str
    #: The environment's description (from the handshake).
    info: environment_pb2.EnvironmentInfo
    #: Largest request this connection may send, in bytes (client and server limits).
    max_message_bytes: int

    @property
    def ended(self) -> EnvError | None:
        """Why the session is over, or None while it is open."""

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
        """Connect and open the session; raises the (fatal) error of a refused handshake."""

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        """Send one request and return its answer (see the module docstring)."""

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        """Call ``callback(reason)`` once when the session ends other than by ``close``."""

    async def close(self) -> None:
        """End the session (close request, end of stream) and release the transport."""

    async def abort(self) -> None:
        """Drop the transport at once, as a crashed client would (no close request)."""


class ConnectionWrapper:
    """A :class:`Connection` that delegates everything to ``inner`` (a decorator's base).

    Subclasses override what they change and keep the guarantees of the module docstring;
    attributes of ``inner`` it does not define (``url``, ``resume_token``, ...) read through.
    ``sibling()`` is the wrapped connection's sibling, unwrapped (a subclass that should
    apply to forks too wraps it again)."""

    def __init__(self, inner: Connection) -> None:
        self.inner = inner

    # Read and written through (the protocol declares them as attributes).
    @property
    def session_id(self) -> str:
        return self.inner.session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self.inner.session_id = value

    @property
    def info(self) -> environment_pb2.EnvironmentInfo:
        return self.inner.info

    @info.setter
    def info(self, value: environment_pb2.EnvironmentInfo) -> None:
        self.inner.info = value

    @property
    def max_message_bytes(self) -> int:
        return self.inner.max_message_bytes

    @max_message_bytes.setter
    def max_message_bytes(self, value: int) -> None:
        self.inner.max_message_bytes = value

    @property
    def ended(self) -> EnvError | None:
        return self.inner.ended

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
        await self.inner.open(handshake, timeout)

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        return await self.inner.request(req, timeout)

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self.inner.on_end(callback)

    async def close(self) -> None:
        await self.inner.close()

    async def abort(self) -> None:
        await self.inner.abort()

    def sibling(self) -> Connection | None:
        make = getattr(self.inner, "sibling", None)
        return make() if make is not None else None

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copying): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)


class MapErrors(ConnectionWrapper):
    """A connection whose raised errors (the transport's failures, see the module docstring)
    go through ``mapper`` first: ``request`` raises ``mapper(err)`` in place of ``err``, and
    ``ended``/``on_end`` report the mapped reason. Error *answers* of the protocol
    (``resp.error``) are returned unchanged, as are the errors of ``open`` (a refused
    handshake is the server's answer, not a lost connection). ``mapper`` returns its
    argument for the errors it leaves alone. Forks (``sibling()``) are mapped too."""

    def __init__(self, inner: Connection, mapper: Callable[[EnvError], EnvError]) -> None:
        super().__init__(inner)
        self.mapper = mapper
        self._mapped: tuple[EnvError, EnvError] | None = None  # (inner's ended, its mapping): mapped once

    def _map(self, err: EnvError) -> EnvError:
        if self._mapped is not None and self._mapped[0] is err:
            return self._mapped[1]
        out = self.mapper(err)
        if err is self.inner.ended:
            self._mapped = (err, out)
        return out

    @property
    def ended(self) -> EnvError | None:
        err = self.inner.ended
        return None if err is None else self._map(err)

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        try:
            return await self.inner.request(req, timeout)
        except EnvError as e:
            raise self._map(e) from None

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self.inner.on_end(None if callback is None else lambda err: callback(self._map(err)))

    def sibling(self) -> Connection | None:
        inner = super().sibling()
        return None if inner is None else MapErrors(inner, self.mapper)
