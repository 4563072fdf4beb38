"""What every transport shares: the features, the session and transport interfaces the checks
see, the answers (a ``SessionResponse`` or the :class:`StreamEnd` of the session), and the
protocol's requests, built once (:class:`RequestBuilder`).

Nothing here does I/O or imports a transport: :mod:`~openenv_conformance.transport.grpc`
and :mod:`~openenv_conformance.transport.ws` import this module, never each other.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self, TypeAlias

import grpc

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import error_pb2, tool_pb2
from openenv.values import to_struct
from openenv_conformance.errors import Violation

__all__ = [
    "EPISODE_FIELDS",
    "FEATURE_REASONS",
    "FRAMES",
    "GRPC",
    "KINDS",
    "PROTOCOL_VERSION",
    "Answer",
    "NoAnswer",
    "RequestBuilder",
    "SessionLike",
    "StreamEnd",
    "Transport",
    "code_name",
    "describe",
    "refusal",
    "rpc_error",
    "expect_error",
    "expect_ok",
    "expect_response",
]

GRPC = "grpc"
FRAMES = "frames"
EPISODE_FIELDS = "episode_fields"

#: Transport kinds, as ``--transport`` names them and :attr:`Target.urls` keys them.
KINDS = ("grpc", "http")

#: The protocol version the suite speaks (and certifies against).
PROTOCOL_VERSION = "1.6"


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """A gRPC status as the error a gRPC call raises: what the other transports raise for an
    answer that has a gRPC equivalent, so callers handle every transport alike."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def refusal(status: int, what: str) -> grpc.aio.AioRpcError | None:
    """The gRPC error of an HTTP refusal (401 UNAUTHENTICATED, 403 PERMISSION_DENIED) of
    ``what``; None for any other status. A server that refuses has decided: a caller waiting
    for the target to come up stops at once (runner._wait_ready)."""
    code = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}.get(status)
    return None if code is None else rpc_error(code, f"{what} answered {status}")


#: Why a check needing a feature is skipped on a transport without it.
FEATURE_REASONS: dict[str, str] = {
    GRPC: "needs the gRPC wire (Session framing, unary calls, gRPC services); the target is certified over "
    "OpenEnv's JSON protocol (HTTP/WebSocket)",
    FRAMES: "checks OpenEnv's HTTP/WebSocket protocol; the target is certified over gRPC (certify its HTTP side "
    "with an http:// target or --transport http)",
    EPISODE_FIELDS: "the server's time steps carry no episode id, step count or terminated/truncated flags (a stock "
    "OpenEnv server sends only `done`), so the episode state machine cannot be observed",
}


class NoAnswer(Violation):
    """The target did not answer within the timeout."""


@dataclasses.dataclass(frozen=True)
class StreamEnd:
    """The end of a session (a gRPC stream's status; a WebSocket's close, as a status)."""

    code: grpc.StatusCode
    details: str = ""

    def __str__(self) -> str:
        return f"stream ended with gRPC status {self.code.name}" + (f" ({self.details})" if self.details else "")


#: What a session answers a request with.
Answer: TypeAlias = pb.SessionResponse | StreamEnd


def code_name(code: int) -> str:
    """``INVALID_ARGUMENT`` for 3; the number itself for codes outside the table."""
    try:
        return error_pb2.ErrorCode.Name(code).removeprefix("ERROR_CODE_")
    except ValueError:
        return f"code {code}"


def describe(resp: Answer) -> str:
    """A one-line description of an answer, for failure messages."""
    if isinstance(resp, StreamEnd):
        return str(resp)
    kind = resp.WhichOneof("kind")
    if kind == "error":
        e = resp.error
        return f"error {code_name(e.code)}{' (fatal)' if e.fatal else ''}: {e.message}"
    return f"a {kind} answer" if kind else "an answer with no kind set"


def expect_response(resp: Answer, kind: str, what: str) -> pb.SessionResponse:
    """``resp``, which must be a ``kind`` answer; a :class:`Violation` naming ``what`` otherwise."""
    if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == kind:
        return resp
    raise Violation(f"{what}: expected a {kind} answer, got {describe(resp)}")


def expect_ok(resp: Answer, kind: str, what: str) -> Any:
    """The ``kind`` part of ``resp``; a :class:`Violation` naming ``what`` otherwise."""
    return getattr(expect_response(resp, kind, what), kind)


def expect_error(resp: Answer, codes: str | tuple[str, ...], what: str, fatal: bool | None = None) -> error_pb2.Status:
    """The error of ``resp``, which must carry one of ``codes`` (names such as
    ``"FAILED_PRECONDITION"``) and, when ``fatal`` is given, that fatality."""
    codes = (codes,) if isinstance(codes, str) else codes
    want = " or ".join(codes)
    if not (isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error"):
        raise Violation(f"{what}: expected error {want}, got {describe(resp)}")
    e = resp.error
    if code_name(e.code) not in codes:
        raise Violation(f"{what}: expected error {want}, got {describe(resp)}")
    if fatal is not None and e.fatal != fatal:
        raise Violation(f"{what}: error {code_name(e.code)} must {'' if fatal else 'not '}be fatal")
    return e


class SessionLike(Protocol):
    """One session, as every check sees it (:class:`~openenv_conformance.transport.grpc.Session`,
    :class:`~openenv_conformance.transport.ws.WsSession`). Requests are ``SessionRequest``
    messages, answers ``SessionResponse`` messages or the :class:`StreamEnd` of the session."""

    opened: bool
    info: pb.EnvironmentInfo | None
    session_id: str
    end: StreamEnd | None
    #: When the answer last returned by ``recv`` arrived (``time.monotonic()``): the gRPC
    #: session stamps each answer as it comes off the wire; the others, as recv returns it.
    received_at: float

    def next_id(self) -> int: ...
    def request(self, request_id: int | None = None, **kind: Any) -> pb.SessionRequest: ...
    def send(self, request: pb.SessionRequest | bytes) -> bool: ...
    def recv(self, timeout: float | None = None) -> Answer: ...
    def exchange(self, request: pb.SessionRequest, timeout: float | None = None) -> Answer: ...
    def handshake(
        self,
        protocol_version: str = PROTOCOL_VERSION,
        *,
        options: Mapping[str, Any] | None = None,
        client_name: str = "openenv-certify",
        request_id: int | None = None,
        num_envs: int = 0,
        autoreset_mode: pb.AutoresetMode = pb.AUTORESET_MODE_UNSPECIFIED,
    ) -> Answer: ...
    def open(self, **kw: Any) -> pb.HandshakeResponse: ...
    def reset(
        self, seed: int | None = None, episode_id: str = "", options: Mapping[str, Any] | None = None
    ) -> Answer: ...
    def step(self, action: Any, timeout_s: float | None = None) -> Answer: ...
    def state(self, env_id: int | None = None) -> Answer: ...
    def batch_reset(
        self, env_ids: Sequence[int] = (), seeds: Sequence[int] = (), options: Mapping[str, Any] | None = None
    ) -> Answer: ...
    def batch_step(self, env_ids: Sequence[int], actions: Sequence[Any], timeout_s: float | None = None) -> Answer: ...
    def list_tools(self) -> Answer: ...
    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> Answer: ...
    def close(self) -> Answer: ...
    def wait_end(self, timeout: float | None = None) -> tuple[StreamEnd, list[pb.SessionResponse]]: ...
    def half_close(self) -> None: ...
    def shutdown(self, timeout: float = 3.0) -> None: ...
    def cancel(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...


class Transport(Protocol):
    """How the suite reaches a target (:class:`~openenv_conformance.transport.grpc.Wire`,
    :class:`~openenv_conformance.transport.ws.WsWire`)."""

    kind: str
    url: str
    timeout: float

    @property
    def sessions(self) -> Sequence[SessionLike]: ...
    @property
    def features(self) -> frozenset[str]: ...
    def get_info(self, timeout: float | None = None) -> pb.EnvironmentInfo: ...
    def health(self, service: str = "", timeout: float | None = None) -> str: ...
    def session(self, channel: Any = None) -> SessionLike: ...
    def new_channel(self) -> Any: ...
    def close_channel(self, channel: Any) -> None: ...
    def close(self) -> None: ...


class RequestBuilder(abc.ABC):
    """The protocol's requests, built once for every transport's session.

    A transport's session provides :meth:`send` (write one request), :meth:`recv` (read the
    next answer, or the end of the session) and the ways a session ends; requests get
    increasing ids unless given one, and :meth:`handshake` records what an accepted
    handshake says (``opened``, ``info``, ``session_id``).
    """

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.end: StreamEnd | None = None
        self.opened = False  # a handshake was accepted
        self.info: pb.EnvironmentInfo | None = None
        self.session_id = ""
        self.received_at = 0.0

    # -- what a transport provides

    @abc.abstractmethod
    def send(self, request: pb.SessionRequest | bytes) -> bool:
        """Write one request (raw bytes where the transport can); False when the session no
        longer accepts writes."""

    @abc.abstractmethod
    def recv(self, timeout: float | None = None) -> Answer:
        """The next answer, or the :class:`StreamEnd` (sticky) once the session is over."""

    @abc.abstractmethod
    def wait_end(self, timeout: float | None = None) -> tuple[StreamEnd, list[pb.SessionResponse]]:
        """Read until the session ends: (its end, the answers read meanwhile)."""

    @abc.abstractmethod
    def half_close(self) -> None:
        """Tell the server no more requests will come (where the transport can)."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Drop the session abruptly (the client vanished)."""

    @abc.abstractmethod
    def shutdown(self, timeout: float = 3.0) -> None:
        """End the session politely, else drop it."""

    # -- requests and answers

    def next_id(self) -> int:
        return next(self._ids)

    def request(self, request_id: int | None = None, **kind: Any) -> pb.SessionRequest:
        """Build a request with the next id (or ``request_id``)."""
        return pb.SessionRequest(request_id=self.next_id() if request_id is None else request_id, **kind)

    def exchange(self, request: pb.SessionRequest, timeout: float | None = None) -> Answer:
        """Send ``request`` and read its answer (or the end of the session). The answer is
        matched by request id: one carrying another id (an extra answer, a missing one, a
        misnumbered one) is a :class:`Violation` said once, where it happens, rather than a
        cascade of answers read in the wrong place."""
        if not self.send(request):
            resp = self.recv(timeout) if self.end is None else self.end
        else:
            resp = self.recv(timeout)
        if isinstance(resp, pb.SessionResponse) and resp.request_id != request.request_id:
            raise Violation(
                f"request {request.request_id} ({request.WhichOneof('kind') or 'no kind'}) was answered under "
                f"request_id {resp.request_id} ({describe(resp)}): an extra, missing or misnumbered answer"
            )
        return resp

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the protocol's requests

    def handshake(
        self,
        protocol_version: str = PROTOCOL_VERSION,
        *,
        options: Mapping[str, Any] | None = None,
        client_name: str = "openenv-certify",
        request_id: int | None = None,
        num_envs: int = 0,
        autoreset_mode: pb.AutoresetMode = pb.AUTORESET_MODE_UNSPECIFIED,
    ) -> Answer:
        """``num_envs > 1`` opens a vectorised session (``autoreset_mode``: an
        ``openenv.v1.AutoresetMode``)."""
        hs = pb.HandshakeRequest(
            protocol_version=protocol_version, client_name=client_name, num_envs=num_envs, autoreset_mode=autoreset_mode
        )
        if options:
            to_struct(dict(options), hs.options)
        resp = self.exchange(self.request(request_id, handshake=hs))
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "handshake":
            self.opened = True
            self.info = resp.handshake.info
            self.session_id = resp.handshake.session_id
        return resp

    def open(self, **kw: Any) -> pb.HandshakeResponse:
        """Handshake, which must succeed."""
        hs: pb.HandshakeResponse = expect_ok(self.handshake(**kw), "handshake", "handshake")
        return hs

    def reset(self, seed: int | None = None, episode_id: str = "", options: Mapping[str, Any] | None = None) -> Answer:
        r = pb.ResetRequest(episode_id=episode_id)
        if seed is not None:
            r.seed = seed
        if options:
            to_struct(dict(options), r.options)
        return self.exchange(self.request(reset=r))

    def step(self, action: Any, timeout_s: float | None = None) -> Answer:
        """``action`` is a Payload (or anything with a ``payload`` attribute)."""
        payload = getattr(action, "payload", action)
        st = pb.StepRequest(action=payload)
        if timeout_s is not None:
            st.timeout.FromNanoseconds(int(timeout_s * 1e9))
        return self.exchange(self.request(step=st))

    def state(self, env_id: int | None = None) -> Answer:
        """``env_id`` addresses one instance of a vectorised session."""
        return self.exchange(self.request(state=pb.StateRequest(env_id=env_id or 0)))

    def batch_reset(
        self, env_ids: Sequence[int] = (), seeds: Sequence[int] = (), options: Mapping[str, Any] | None = None
    ) -> Answer:
        r = pb.BatchResetRequest(env_ids=list(env_ids), seeds=list(seeds))
        if options:
            to_struct(dict(options), r.options)
        return self.exchange(self.request(batch_reset=r))

    def batch_step(self, env_ids: Sequence[int], actions: Sequence[Any], timeout_s: float | None = None) -> Answer:
        """``actions``: Payloads (or anything with a ``payload`` attribute), one per id."""
        b = pb.BatchStepRequest(env_ids=list(env_ids), actions=[getattr(a, "payload", a) for a in actions])
        if timeout_s is not None:
            b.timeout.FromNanoseconds(int(timeout_s * 1e9))
        return self.exchange(self.request(batch_step=b))

    def list_tools(self) -> Answer:
        return self.exchange(self.request(list_tools=tool_pb2.ListToolsRequest()))

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> Answer:
        c = tool_pb2.CallToolRequest(name=name)
        if arguments:
            to_struct(dict(arguments), c.arguments)
        return self.exchange(self.request(call_tool=c))

    def close(self) -> Answer:
        return self.exchange(self.request(close=pb.CloseRequest()))
