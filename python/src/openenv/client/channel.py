"""What a client transport implements: a :class:`Channel` carries one stream of protocol messages.

The client half of the protocol (request ids, pipelining and coalescing, resumption, world and
vectorised sessions, how a stream's end becomes an error) is written once, in
:class:`openenv.client.session.ClientSession`; a transport only moves messages. It implements
two small interfaces:

* :class:`Dialer`: opens a new :class:`Channel` to its server (the first one of a session, and
  one per resume attempt), carrying the credentials and settings of the connection;
* :class:`Channel`: one stream (a gRPC ``Session`` call, a WebSocket, an in-memory queue pair):
  ``send`` a ``SessionRequest``, ``receive`` a ``SessionResponse``, ``end`` the input
  (half-close) and ``close`` it.

How a stream ends is said with the protocol's own errors (:mod:`openenv.errors`), whatever the
wire: ``receive`` returns None when the server ended the stream normally (the end of its
answers) and raises a fatal :class:`~openenv.EnvError` when it ended otherwise (a lost
connection is ``UNAVAILABLE``, a message over a limit ``RESOURCE_EXHAUSTED``, a status the server
chose is that status). No transport speaks in another's types.
"""

from __future__ import annotations

from typing import Protocol

from openenv.v1 import environment_pb2

__all__ = ["Channel", "Dialer", "Unreachable"]


class Unreachable(Exception):
    """Raised by :meth:`Dialer.dial` when the server cannot be reached in time (the session says
    "cannot connect"); its text, when any, says what failed. A refusal by the server (a token
    refused, no such transport) is a fatal :class:`~openenv.EnvError` instead."""


class Channel(Protocol):
    """One stream of protocol messages to a server (see the module docstring).

    ``send`` and ``receive`` may run concurrently (one reader, one writer at a time)."""

    async def send(self, request: environment_pb2.SessionRequest) -> environment_pb2.SessionResponse | None:
        """Send one message. Returns None (its answer comes through ``receive``), or the answer
        itself when the transport answers the request without the server (a translating channel:
        OpenEnv's frames have no handshake and no reply to ``close``). Raises a fatal
        :class:`~openenv.EnvError` when the stream can take no more (it is over; ``receive`` says
        why), a non-fatal one when only this message is refused (a transport that cannot express
        it) and the stream goes on."""

    async def receive(self) -> environment_pb2.SessionResponse | None:
        """The next message from the server; None when the server ended the stream normally;
        raises a fatal :class:`~openenv.EnvError` saying why it ended otherwise."""

    async def end(self) -> None:
        """End this side's input (half-close): the server answers what it was sent, then ends
        the stream. Never raises (a stream already over has nothing to end)."""

    async def close(self) -> None:
        """Release the stream and what it holds: a stream not yet over is dropped as a crashed
        client drops it (no close request). Idempotent; never raises."""


class Dialer(Protocol):
    """Opens channels to one server with one connection's settings (see the module docstring)."""

    #: The server's address as the session names it in errors.
    url: str
    #: The key the server's description is kept under (RFC 0013): its address, or what
    #: names an in-process engine.
    info_key: str

    @property
    def resumable(self) -> bool:
        """Whether a session on this transport may be resumed on a new channel after a dropped
        one (RFC 0006): False where a stream cannot drop (in-process)."""

    @property
    def coalesces(self) -> bool:
        """Whether requests may be coalesced into pipelined messages (RFC 0009) when the server
        offers it: False where there is no wire to save messages on."""

    @property
    def answers_carry_ids(self) -> bool:
        """Whether the server's answers carry the request ids (True but for stock OpenEnv's JSON
        frames, whose answers come in order, without one; known once a channel is open): without
        ids a request given up on (a client-side timeout) would shift later answers, so the
        session is dropped instead."""

    async def dial(self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool) -> Channel:
        """A new channel, connected within ``timeout`` (raises :class:`Unreachable` when not).
        ``first``: the session's first channel (with the caller's trace context), not a resume's."""
