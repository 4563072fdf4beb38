"""Who may reach a server's listeners, as one settings object (RFC 0003, docs/security.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from openenv.runtime.limits import Settings, boolean, documented, setting
from openenv.security.tls import TlsConfig
from openenv.security.tokens import TokenSet

__all__ = ["SecuritySettings"]


def _tokens(value: Any) -> TokenSet:
    if isinstance(value, TokenSet):
        return value
    if value is None:
        return TokenSet()
    if isinstance(value, (str, bytes)):  # would be taken one character at a time
        raise TypeError("give a list of tokens, not one string")
    return TokenSet(value)


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError("give a list or tuple of strings")
    names = tuple(value)
    if not all(isinstance(v, str) for v in names):
        raise TypeError("every entry must be a string")
    return names


@documented
@dataclasses.dataclass(frozen=True)
class SecuritySettings(Settings):
    """Who may reach a server's listeners (frozen; :meth:`replace` makes a changed copy).

    What users may rely on: ``tokens`` and ``tls`` apply to every listener (gRPC and the HTTP
    side); ``allowed_origins`` and ``allowed_hosts`` to the HTTP side (gRPC has no browser
    callers); a bad value raises ``ValueError`` naming the field when the object is built.
    """

    tokens: TokenSet = setting(
        TokenSet(),
        "Bearer tokens every listener accepts (a TokenSet or a list of strings; empty: anonymous). "
        "Every request but health checks needs one of them.",
        convert=_tokens,
        expect="a TokenSet or a list of printable ASCII tokens",
    )
    tls: TlsConfig | None = setting(
        None,
        "Certificate and key (and optional client CA, for mutual TLS) of every listener (None: plaintext).",
        check=lambda v: v is None or isinstance(v, TlsConfig),
        expect="a TlsConfig or None",
    )
    allow_anonymous: bool = setting(
        False,
        "Serve a non-loopback address without a token (a server refuses to start otherwise).",
        **boolean(),
    )
    allowed_origins: tuple[str, ...] = setting(
        (),
        "Browser origins allowed on the HTTP side besides the server's own (``'*'``: any).",
        convert=_names,
        expect="a list or tuple of strings",
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "``Host`` names the HTTP side answers besides loopback ones when bound to loopback (DNS rebinding).",
        convert=_names,
        expect="a list or tuple of strings",
    )
