"""Environment URLs: which transport a URL names, and where it points.

* ``grpc://host:port`` (or bare ``host:port``): the protocol's gRPC ``Session`` stream;
  ``grpcs://host:port``: the same over TLS;
* ``http(s)://host:port[/prefix]`` and ``ws(s)://...``: OpenEnv's WebSocket protocol on
  ``/ws`` (our servers' HTTP side, ``openenv bridge``, stock OpenEnv servers, Spaces);
* ``ws(s)://host:port[/prefix]/v1/session`` (or ``http(s)://`` with that path): the protocol's
  binary WebSocket transport (RFC 0011): a URL whose path ends in :data:`BINARY_PATH` names it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse, urlsplit, urlunsplit

__all__ = [
    "BINARY_PATH",
    "BINARY_SUBPROTOCOL",
    "GRPC_SCHEMES",
    "WS_SCHEMES",
    "is_binary_url",
    "is_hf_space",
    "is_loopback",
    "parse_url",
    "scheme_of",
    "split_url",
]

GRPC_SCHEMES = frozenset({"grpc", "grpcs"})
WS_SCHEMES = frozenset({"http", "https", "ws", "wss"})
BINARY_PATH = "/v1/session"
"""The binary WebSocket transport's route on a server's HTTP listener (RFC 0011)."""
BINARY_SUBPROTOCOL = "openenv.v1+proto"
"""Its WebSocket subprotocol: the contract's major version and encoding."""


def is_binary_url(url: str) -> bool:
    """True when ``url`` names the binary WebSocket transport: an ``http(s)``/``ws(s)`` URL
    whose path ends in ``/v1/session``."""
    u = urlsplit(url)
    return u.scheme.lower() in WS_SCHEMES and u.path.rstrip("/").endswith(BINARY_PATH)


def scheme_of(url: str) -> str:
    """The lower-case scheme of an environment URL (``grpc`` for a bare ``host:port``);
    ValueError for a scheme no transport speaks."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else "grpc"
    if scheme not in GRPC_SCHEMES | WS_SCHEMES:
        raise ValueError(
            f"unsupported URL scheme {scheme!r} in {url!r} "
            "(use grpc(s)://host:port, or http(s)://, ws(s):// for OpenEnv's WebSocket protocol)"
        )
    return scheme


def parse_url(url: str) -> tuple[str, str]:
    """(scheme, target) of an environment URL: ``grpc://host:port`` or ``host:port``."""
    if "://" not in url:
        return "grpc", url
    u = urlparse(url)
    if not u.hostname or not u.port:
        raise ValueError(f"environment URL {url!r} needs a host and a port")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return u.scheme, f"{host}:{u.port}"


def split_url(base_url: str) -> tuple[str, str]:
    """(WebSocket URL of ``/ws``, HTTP base URL) of an environment URL.

    ``http://h:8000`` -> (``ws://h:8000/ws``, ``http://h:8000``); a path is kept as a
    prefix (``https://h/env`` -> ``wss://h/env/ws``); a URL already ending in ``/ws`` is
    used as is.
    """
    u = urlsplit(base_url)
    scheme = u.scheme.lower()
    if scheme not in WS_SCHEMES or not u.hostname:
        raise ValueError(f"not an http(s):// or ws(s):// URL: {base_url!r}")
    secure = scheme in ("https", "wss")
    path = u.path.rstrip("/")
    if path.endswith("/ws"):
        path = path[:-3]
    ws = urlunsplit(("wss" if secure else "ws", u.netloc, path + "/ws", u.query, ""))
    http = urlunsplit(("https" if secure else "http", u.netloc, path, "", ""))
    return ws, http


def is_hf_space(url: str) -> bool:
    """True when the URL points at a Hugging Face Space (``*.hf.space``), whose private
    Spaces take the user's Hugging Face token as the bearer token."""
    host = (urlsplit(url).hostname or "").lower()
    return host.endswith(".hf.space")


def is_loopback(url: str) -> bool:
    """True when the URL's host is a loopback name or address (proxies are then skipped)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
