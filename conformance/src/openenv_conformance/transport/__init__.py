"""Transports: how the suite reaches a target, and what each one can express.

The checks talk to a target through a :class:`Transport` (unary calls, health, sessions)
whose sessions (:class:`SessionLike`) answer every request with an
``openenv.v1.SessionResponse`` (or the :class:`StreamEnd` of the session), whatever travels
on the wire. Two implementations exist:

* :class:`~openenv_conformance.transport.grpc.Wire` (:mod:`.grpc`): the gRPC service
  (``grpc://HOST:PORT``);
* :class:`~openenv_conformance.transport.ws.WsWire` (:mod:`.ws`): OpenEnv's JSON protocol over
  HTTP and a WebSocket (``http(s)://HOST:PORT``, ``ws(s)://HOST:PORT``): the HTTP side of every
  ``openenv serve``, ``openenv bridge``, or any OpenEnv server;
* :class:`~openenv_conformance.transport.binary.BinaryWire` (:mod:`.binary`): the protocol's
  binary WebSocket transport (``ws(s)://HOST:PORT/v1/session``, RFC 0011): the gRPC wire's
  sessions over a WebSocket, with the features of the gRPC wire.

What both share lives in :mod:`.base` (imported by both, importing neither).

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

from openenv.client.urls import is_binary_url
from openenv_conformance.transport.base import (
    EPISODE_FIELDS,
    FEATURE_REASONS,
    FRAMES,
    GRPC,
    KINDS,
    PROTOCOL_VERSION,
    Answer,
    NoAnswer,
    RequestBuilder,
    SessionLike,
    StreamEnd,
    Transport,
    code_name,
    describe,
    expect_error,
    expect_ok,
    expect_response,
)
from openenv_conformance.transport.binary import BinaryWire
from openenv_conformance.transport.grpc import SERVICE, Session, Wire
from openenv_conformance.transport.ws import UnsupportedRequest, WsSession, WsWire

__all__ = [
    "EPISODE_FIELDS",
    "FEATURE_REASONS",
    "FRAMES",
    "GRPC",
    "KINDS",
    "PROTOCOL_VERSION",
    "SERVICE",
    "Answer",
    "NoAnswer",
    "RequestBuilder",
    "Session",
    "SessionLike",
    "StreamEnd",
    "Transport",
    "UnsupportedRequest",
    "Wire",
    "WsSession",
    "WsWire",
    "code_name",
    "describe",
    "expect_error",
    "expect_ok",
    "expect_response",
    "open_transport",
    "transport_kind",
]


def transport_kind(url: str) -> str:
    """``grpc`` for ``grpc://`` URLs, ``binary`` for ``ws(s)://`` (or ``http(s)://``) URLs whose
    path ends in ``/v1/session``, ``http`` for other ``http(s)://`` and ``ws(s)://`` ones
    (ValueError otherwise)."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "grpc":
        return "grpc"
    if is_binary_url(url):
        return "binary"
    if scheme in ("http", "https", "ws", "wss"):
        return "http"
    raise ValueError(f"{url!r}: expected grpc://, http(s):// or ws(s)://")


def open_transport(url: str, *, timeout: float = 10.0, token: str | None = None) -> Transport:
    """The transport reaching ``url`` (nothing is sent yet); ``token``: the bearer token
    every call carries (RFC 0003), when the target requires one."""
    kind = transport_kind(url)
    if kind == "grpc":
        return Wire(url, timeout=timeout, token=token)
    if kind == "binary":
        return BinaryWire(url, timeout=timeout, token=token)
    return WsWire(url, timeout=timeout, token=token)
