"""Who may call: the one bearer-token check every listener applies (RFC 0003).

:class:`Authenticator` answers, for a call's ``Authorization`` value (and, on a WebSocket
upgrade, the subprotocols offered and the query string), whether it may proceed and, when not,
the one sentence every listener says: gRPC (grpc.aio's guard interceptor, grpclib), the HTTP
side (``/ws``, ``/mcp``, every route but ``/health``), the binary WebSocket listener and the
in-process connection all ask it, so a token is accepted or refused alike on every transport.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qsl

from openenv.security.tokens import TokenSet

__all__ = ["NOT_ACCEPTED", "REQUIRED", "WS_TOKEN_PREFIX", "Authenticator"]

REQUIRED = "a bearer token is required"
"""Why a call without an ``Authorization`` value is refused (UNAUTHENTICATED, HTTP 401)."""

NOT_ACCEPTED = "the bearer token is not accepted"
"""Why a call whose token is not one of the accepted ones is refused."""

WS_TOKEN_PREFIX = "bearer."
"""An offered WebSocket subprotocol ``bearer.<token>`` carries the token (browsers cannot set
headers on a WebSocket)."""


class Authenticator:
    """The bearer tokens of a server, as every listener checks them.

    What users may rely on: with no token configured every call proceeds; with tokens, a call
    proceeds when its ``Authorization: Bearer <token>`` value names one of them (compared in
    constant time, :class:`TokenSet`), and a WebSocket upgrade also when it offers the
    subprotocol ``bearer.<token>`` or carries ``?access_token=<token>``; every other call is
    refused with :data:`REQUIRED` or :data:`NOT_ACCEPTED`.
    """

    __slots__ = ("tokens",)

    def __init__(self, tokens: TokenSet | None = None) -> None:
        #: The accepted tokens (empty: anonymous access).
        self.tokens = tokens if tokens is not None else TokenSet()

    def __bool__(self) -> bool:
        """True when a token is required."""
        return bool(self.tokens)

    def __repr__(self) -> str:
        return f"Authenticator({self.tokens!r})"

    def refusal(self, authorization: str | bytes | None) -> str | None:
        """Why a call with this ``Authorization`` value (None: none sent) is refused, or None
        when it may proceed."""
        if not self.tokens or self.tokens.accepts_header(authorization):
            return None
        return REQUIRED if authorization is None else NOT_ACCEPTED

    def websocket_refusal(
        self, authorization: str | bytes | None, offered: Sequence[str], query: str
    ) -> tuple[str | None, str | None]:
        """(why it is refused or None, how the token came: ``"header"``, ``"subprotocol"``,
        ``"query"``, or None with no token required) for a WebSocket upgrade: its
        ``Authorization`` value, the subprotocols it offers, its query string."""
        if not self.tokens:
            return None, None
        if authorization is not None and self.tokens.accepts_header(authorization):
            return None, "header"
        for p in offered:
            if p.startswith(WS_TOKEN_PREFIX) and self.tokens.accepts(p[len(WS_TOKEN_PREFIX) :]):
                return None, "subprotocol"
        for k, v in parse_qsl(query):
            if k == "access_token" and self.tokens.accepts(v):
                return None, "query"
        return (REQUIRED if authorization is None else NOT_ACCEPTED), None
