"""Transports: how the suite reaches a target, and what each one can express.

The checks talk to a target through a :class:`Transport` (unary calls, health, sessions)
whose sessions answer every request with an ``openenv.v1.SessionResponse`` (or the
:class:`~openenv_conformance.wire.StreamEnd` of the session), whatever travels on the wire.
Two implementations exist:

* :class:`openenv_conformance.wire.Wire`: the gRPC service (``grpc://HOST:PORT``);
* :class:`openenv_conformance.wswire.WsWire`: OpenEnv's JSON protocol over HTTP and a
  WebSocket (``http(s)://HOST:PORT``, ``ws(s)://HOST:PORT``): the HTTP side of every
  ``openenv serve``, ``openenv bridge``, or any OpenEnv server.

A transport declares **features**; a check that needs a feature its transport lacks is
skipped with the reason (:data:`FEATURE_REASONS`, or the check's own ``why``):

* :data:`GRPC`: the gRPC Session framing (request ids, pipelining of arbitrary requests,
  half-close, raw bytes, handshake requests and versions), ``grpc.health.v1``, server
  reflection, ``GetInfo`` and vectorised sessions;
* :data:`FRAMES`: OpenEnv's frames on ``/ws`` and its HTTP documents (``/health``,
  ``/metadata``, ``/schema``);
* :data:`EPISODE_FIELDS`: time steps carry the server's episode id, step count and
  ``terminated``/``truncated``, and ``state`` its episode status (gRPC and openenv's
  bridge; a stock OpenEnv server sends only ``done``), so the episode state machine of
  docs/protocol.md §3 can be observed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from openenv.v1 import environment_pb2 as pb

__all__ = [
    "EPISODE_FIELDS",
    "FEATURE_REASONS",
    "FRAMES",
    "GRPC",
    "KINDS",
    "SessionLike",
    "Transport",
    "open_transport",
    "transport_kind",
]

GRPC = "grpc"
FRAMES = "frames"
EPISODE_FIELDS = "episode_fields"

#: Transport kinds, as ``--transport`` names them and :attr:`Target.urls` keys them.
KINDS = ("grpc", "http")

#: Why a check needing a feature is skipped on a transport without it.
FEATURE_REASONS: dict[str, str] = {
    GRPC: "needs the gRPC wire (Session framing, unary calls, gRPC services); the target is certified over "
          "OpenEnv's JSON protocol (HTTP/WebSocket)",
    FRAMES: "checks OpenEnv's HTTP/WebSocket protocol; the target is certified over gRPC (certify its HTTP side "
            "with an http:// target or --transport http)",
    EPISODE_FIELDS: "the server's time steps carry no episode id, step count or terminated/truncated flags (a stock "
                    "OpenEnv server sends only `done`), so the episode state machine cannot be observed",
}


class SessionLike(Protocol):
    """One session, as every check sees it (``wire.Session``, ``wswire.WsSession``)."""

    opened: bool
    info: pb.EnvironmentInfo | None
    session_id: str

    def request(self, request_id: int | None = None, **kind: Any) -> pb.SessionRequest: ...
    def send(self, request: Any) -> bool: ...
    def recv(self, timeout: float | None = None) -> Any: ...
    def exchange(self, request: pb.SessionRequest, timeout: float | None = None) -> Any: ...
    def handshake(self, protocol_version: str = "1.0", *, options: Mapping[str, Any] | None = None,
                  client_name: str = "openenv-certify", request_id: int | None = None) -> Any: ...
    def open(self, **kw: Any) -> pb.HandshakeResponse: ...
    def reset(self, seed: int | None = None, episode_id: str = "",
              options: Mapping[str, Any] | None = None) -> Any: ...
    def step(self, action: Any, timeout_s: float | None = None) -> Any: ...
    def state(self) -> Any: ...
    def list_tools(self) -> Any: ...
    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any: ...
    def close(self) -> Any: ...
    def wait_end(self, timeout: float | None = None) -> Any: ...
    def shutdown(self, timeout: float = 3.0) -> None: ...
    def cancel(self) -> None: ...


class Transport(Protocol):
    """How the suite reaches a target (``wire.Wire``, ``wswire.WsWire``)."""

    kind: str
    url: str
    timeout: float
    sessions: list[Any]

    @property
    def features(self) -> frozenset[str]: ...
    def get_info(self, timeout: float | None = None) -> pb.EnvironmentInfo: ...
    def health(self, service: str = "", timeout: float | None = None) -> str: ...
    def session(self, channel: Any = None) -> Any: ...
    def new_channel(self) -> Any: ...
    def close_channel(self, channel: Any) -> None: ...
    def close(self) -> None: ...


def transport_kind(url: str) -> str:
    """``grpc`` for ``grpc://`` URLs, ``http`` for ``http(s)://`` and ``ws(s)://`` ones
    (ValueError otherwise)."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "grpc":
        return "grpc"
    if scheme in ("http", "https", "ws", "wss"):
        return "http"
    raise ValueError(f"{url!r}: expected grpc://, http(s):// or ws(s)://")


def open_transport(url: str, *, timeout: float = 10.0) -> Transport:
    """The transport reaching ``url`` (nothing is sent yet)."""
    if transport_kind(url) == "grpc":
        from openenv_conformance.wire import Wire

        return Wire(url, timeout=timeout)
    from openenv_conformance.wswire import WsWire

    return WsWire(url, timeout=timeout)
