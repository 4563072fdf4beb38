"""What the engine needs of a transport: one session stream (read, write, abort, peer, metadata)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Protocol, runtime_checkable

from openenv.errors import ErrorCode
from openenv.runtime.granularity import Undecodable
from openenv.v1 import environment_pb2

__all__ = ["Incoming", "Prepared", "Stream"]


@dataclasses.dataclass(slots=True)
class Prepared:
    """A request whose payload the transport has already decoded into a Python value.

    A translator from another encoding (OpenEnv's JSON frames) sends ``request`` with its kind
    and scalar fields set and the payload left empty, plus ``action``: the action of a ``step``
    as the environment takes it, or the arguments of a ``call_tool`` as a dict. The engine then
    skips the protobuf payload (the decoded-JSON path costs no protobuf round trip)."""

    request: environment_pb2.SessionRequest
    action: Any = None


Incoming = environment_pb2.SessionRequest | Undecodable | Prepared | None
"""What :meth:`Stream.read` returns: a request, bytes that did not decode (answered
``INVALID_ARGUMENT`` in band), a prepared request, or None at the end of the client's input."""


@runtime_checkable
class Stream(Protocol):
    """One ``Session`` stream, as a transport carries it (gRPC call, WebSocket, in-process queue).

    The engine calls :meth:`read` and :meth:`write` from one task, never concurrently with
    themselves; :meth:`abort` ends the stream with a status (it raises, as grpc.aio's does) and
    is the last call. A transport that a worker of several serves must also take one
    :meth:`read` in progress while another task writes: the relay of a resume or join to the
    sibling worker holding its session reads the client's requests while it writes answers
    (:meth:`openenv.workers.WorkerPeers.relay`; gRPC, the binary WebSocket and picows do).
    Every member below is used by the engine, and only these; a transport that has nothing to
    say for one gives its neutral value (``encode_result = None``, ``relayed = False``).
    """

    @property
    def encode_result(self) -> Callable[[Any], Any] | None:
        """None (the engine encodes results into the response, as protobuf), or a function
        ``(result) -> encoded`` the engine calls, in place of encoding into the response, on the
        result of every request of a single session that has one: the ``StepResult`` of
        ``reset`` and ``step``, the ``SessionState`` of ``state``, the ``list[Tool]`` of
        ``list_tools`` and the ``ToolResult`` of ``call_tool``; the response then has its kind
        set and that part left empty, and the engine passes what it returned to
        ``write(response, encoded)`` (a JSON translator builds its frame from Python values, and
        bounds its size itself). An exception it raises is the request's INTERNAL error; for a
        step, the step then does not count, as when a protobuf encoding fails."""
        ...

    @property
    def relayed(self) -> bool:
        """True for a stream a sibling worker relayed to this one (RFC 0013): its handshake is
        served here, never relayed again."""
        ...

    async def read(self) -> Incoming:
        """The next request, or None when the client has no more (half-close, disconnect)."""
        ...

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        """Send one response (in request order); ``encoded`` is what :attr:`encode_result`
        returned for it (None for every response when the stream has no ``encode_result``,
        and for responses that carry no result)."""
        ...

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        """End the stream with a status instead of a response (handshake deadline, session
        ended by the server, taken over by a resumed stream)."""
        ...

    def peer(self) -> str:
        """The client's address in gRPC's form (``ipv4:HOST:PORT``, ``ipv6:[HOST]:PORT``,
        ``unix:PATH``), or ``""``; sessions are counted per client host."""
        ...

    def metadata(self) -> Sequence[tuple[str, str]]:
        """The stream's request metadata (headers), lower-case keys."""
        ...
