"""Bearer tokens: which are accepted, how they are read, and when one is mandatory."""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterable

__all__ = ["TOKEN_ENV", "TokenSet", "bearer_token", "check_bind", "is_loopback_host"]

TOKEN_ENV = "OPENENV_TOKEN"
"""The environment variable holding the token (server: accepted tokens, comma-separated;
client: the token sent)."""

_MAX_TOKEN_CHARS = 4096  # a longer "token" is refused before any comparison


def bearer_token(value: str | bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive);
    None when absent or of another scheme."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > _MAX_TOKEN_CHARS:
        return None
    return token


class TokenSet:
    """The bearer tokens a listener accepts. Empty: anonymous access (no check).

    Several tokens may be accepted at once (e.g. to rotate one without downtime). Tokens are
    compared with :func:`hmac.compare_digest` against every accepted token, so the time taken
    does not reveal which one (or how much of one) matched.
    """

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        cleaned = []
        for t in tokens:
            t = t.strip()
            if not t:
                continue
            if any(c.isspace() for c in t) or not t.isascii() or len(t) > _MAX_TOKEN_CHARS:
                raise ValueError("a token must be printable ASCII without spaces, at most 4096 characters")
            cleaned.append(t)
        self._tokens = tuple(dict.fromkeys(cleaned))
        self._encoded = tuple(t.encode() for t in self._tokens)

    @classmethod
    def load(cls, tokens: Iterable[str] = (), token_file: str | None = None, *, environ: bool = True) -> TokenSet:
        """Tokens given directly, read from ``token_file`` (one per line; blank lines and
        ``#`` comments skipped) and, when ``environ``, from ``$OPENENV_TOKEN``
        (comma-separated). A missing or empty token file is an error, not anonymous access."""
        out = list(tokens)
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f]
            found = [ln for ln in lines if ln and not ln.startswith("#")]
            if not found:
                raise ValueError(f"token file {token_file} holds no token")
            out += found
        if environ:
            out += os.environ.get(TOKEN_ENV, "").split(",")
        return cls(out)

    def __bool__(self) -> bool:
        return bool(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __eq__(self, other: object) -> bool:
        # Settings objects holding a TokenSet compare equal when they accept the same tokens
        # (configuration equality, never on a request's path: those use accepts_header).
        return isinstance(other, TokenSet) and set(self._tokens) == set(other._tokens)

    def __hash__(self) -> int:
        return hash(frozenset(self._tokens))

    def __repr__(self) -> str:  # never the tokens themselves
        return f"TokenSet({len(self._tokens)} token(s))"

    def accepts(self, token: str | None) -> bool:
        """True when no token is required, or ``token`` is one of the accepted ones."""
        if not self._tokens:
            return True
        if token is None:
            return False
        given = token.encode("utf-8", "replace")
        ok = False
        for t in self._encoded:  # no early exit: every comparison runs
            ok |= hmac.compare_digest(given, t)
        return ok

    def accepts_header(self, value: str | bytes | None) -> bool:
        """:meth:`accepts` for an ``Authorization`` header value."""
        return self.accepts(bearer_token(value)) if self._tokens else True


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` (and ``*.localhost``), 127.0.0.0/8 and ``::1`` (brackets
    and a ``:port`` suffix allowed)."""
    h = host.strip().lower()
    if h.startswith("["):
        h = h[1:].split("]", 1)[0]
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    h = h.rstrip(".")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: TokenSet, allow_anonymous: bool, what: str = "the server") -> None:
    """ValueError when ``host`` is not a loopback address, no token is configured and
    anonymous access was not asked for: a listener reachable from the network is never
    open to anyone by accident."""
    if tokens or allow_anonymous or is_loopback_host(host):
        return
    raise ValueError(
        f"{what} would listen on {host} without authentication: give a token "
        f"(--token, --token-file or ${TOKEN_ENV}), or --allow-anonymous to serve anyone who can reach it"
    )
