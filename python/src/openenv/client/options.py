"""How a client connects: one typed, frozen, validated object, :class:`ConnectionOptions`.

Every transport of the client takes its settings from it (:class:`~openenv.client.GrpcConnection`,
:class:`~openenv.client.WsConnection`, the grpclib engine, the in-process connection of
:mod:`openenv.testing`) and keeps it as ``connection.options``; :class:`~openenv.EnvClient`
builds one from its keywords, or takes one whole::

    opts = ConnectionOptions(max_message_bytes=16 << 20, token="s3cret", ca_file="ca.pem")
    async with EnvClient("grpcs://env.example:50051", connection_options=opts) as env:
        ...

What you may rely on:

* The keywords the constructors took before this object existed (``max_message_bytes=``,
  ``keepalive_s=``, ``token=``, ``ca_file=``, ``client_cert=``, ``connect_timeout=``, and the
  WebSocket connection's ``ping_timeout_s=``) keep working and mean the same; given beside
  ``connection_options=``, they replace its fields (:meth:`ConnectionOptions.merged`).
* Values are checked when the object is made (``ValueError``/``TypeError``), not when a
  connection first uses them; a made object never changes (``dataclasses.replace`` makes another).
* A transport ignores what it has no use for (the in-process connection has no keepalive,
  TLS or token).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "ConnectionOptions"]

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest message a client sends or accepts by default (the server may allow less: the
smaller of the two applies, from the handshake's capabilities)."""


def _seconds(name: str, value: Any, *, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not ((value > 0 or (zero and value == 0)) and math.isfinite(value)):
        least = "non-negative" if zero else "positive"
        raise ValueError(f"{name} must be a {least}, finite number of seconds, not {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """The settings of one client connection (see the module docstring).

    ``connect_timeout``: seconds to connect and complete the handshake.
    ``max_message_bytes``: the largest message sent or received (the server's own limit,
    from the handshake, lowers it for requests).
    ``keepalive_s``: seconds between keepalive pings (HTTP/2 pings for gRPC, WebSocket pings);
    0: none.
    ``keepalive_timeout_s``: how long an unanswered ping may wait before the connection is
    considered dead (the WebSocket connection's ``ping_timeout_s``).
    ``token``: the bearer token sent (RFC 0003); None sends none. (:class:`~openenv.EnvClient`
    fills in ``$OPENENV_TOKEN`` before a connection sees it; a connection made by hand does not.)
    ``ca_file``: the CA that signed a TLS server's certificate (default: the system's).
    ``client_cert``: (certificate file, key file) presented to a server that requires one
    (mutual TLS).
    """

    connect_timeout: float = 30.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    keepalive_s: float = 30.0
    keepalive_timeout_s: float = 20.0
    token: str | None = None
    ca_file: str | None = None
    client_cert: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        _seconds("connect_timeout", self.connect_timeout)
        _seconds("keepalive_s", self.keepalive_s, zero=True)
        _seconds("keepalive_timeout_s", self.keepalive_timeout_s)
        mmb = self.max_message_bytes
        if isinstance(mmb, bool) or not isinstance(mmb, int):
            raise TypeError(f"max_message_bytes must be an int, not {mmb!r}")
        if mmb < 1:
            raise ValueError(f"max_message_bytes must be >= 1, not {mmb}")
        if self.token is not None:
            if not isinstance(self.token, str):
                raise TypeError(f"token must be a str or None, not {type(self.token).__name__}")
            # It travels in a header: a line break would end the header and start another.
            if any(c in self.token for c in "\r\n\0"):
                raise ValueError("token must not contain line breaks or NUL")
        if self.ca_file is not None and not isinstance(self.ca_file, str):
            raise TypeError(f"ca_file must be a path (str) or None, not {type(self.ca_file).__name__}")
        cert = self.client_cert
        if cert is not None:
            if not (isinstance(cert, tuple | list) and len(cert) == 2 and all(isinstance(p, str) for p in cert)):
                raise TypeError(f"client_cert must be a (certificate file, key file) pair, not {cert!r}")
            object.__setattr__(self, "client_cert", (cert[0], cert[1]))  # a list given: stored as the tuple

    def merged(self, **overrides: Any) -> ConnectionOptions:
        """A copy with the given fields replaced; ``None`` values are left out (so that a
        constructor may pass its old keywords, defaulting to None, straight through).
        ``ping_timeout_s`` is accepted as ``keepalive_timeout_s`` (the WebSocket connection's
        old name). Unknown names raise ``TypeError``."""
        if "ping_timeout_s" in overrides:
            overrides.setdefault("keepalive_timeout_s", overrides.pop("ping_timeout_s"))
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"unknown connection option(s): {', '.join(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self
