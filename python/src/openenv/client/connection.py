"""The transport seam of the client: a :class:`Connection` carries one session.

A connection turns protocol requests (``openenv.v1.SessionRequest``) into answers
(``SessionResponse``), whatever the wire: :class:`~openenv.client.grpc.GrpcConnection` (the
protocol's gRPC ``Session`` stream) and :class:`~openenv.client.ws.WsConnection` (OpenEnv's
JSON frames on ``/ws``). :class:`~openenv.EnvClient` is written against this interface
only; so is the bridge's remote backend.

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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from openenv.errors import EnvError
from openenv.v1 import environment_pb2

__all__ = ["Connection"]


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
