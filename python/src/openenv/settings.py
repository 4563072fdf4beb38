"""How a server serves, as typed, frozen settings objects (``openenv.ServerSettings``).

One declaration of each setting, shared by :class:`openenv.Host`, :func:`openenv.serve`,
``openenv serve`` (which derives its options' defaults and help from these fields), the gRPC
listeners and the HTTP side:

* :class:`ServerSettings`: everything but where to listen; composed of
* :class:`~openenv.runtime.limits.Limits`: what the server allows (capacity, message size,
  timeouts, pipelining, isolation, ...);
* :class:`~openenv.security.SecuritySettings`: tokens, TLS, anonymous access, browser origins;
* :class:`HttpSettings` (with :class:`HttpLimits`): the HTTP side's transport (keepalive,
  compression, connections, request-head bounds);
* which library serves gRPC (``grpc_library``), reflection, metrics, the playground.

Every object is frozen (``replace`` makes a changed copy) and checks its values when built: a
bad one raises ``ValueError`` naming the class, the field and the value. This module needs no
extra: the HTTP side's settings can be written where the ``http`` extra is not installed.

The keyword arguments of ``Host``, ``Server`` and ``serve`` that predate these classes keep
working; :meth:`ServerSettings.of` is the one place that maps them onto the settings.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from openenv.runtime.limits import (
    DEFAULT_MAX_MESSAGE_BYTES,
    LimitKeywords,
    Limits,
    Settings,
    boolean,
    documented,
    integer,
    one_of,
    seconds,
    setting,
)
from openenv.security import SecuritySettings, TlsConfig, TokenSet

__all__ = [
    "DEFAULT_GRPC_LIBRARY",
    "GRPC_LIBRARIES",
    "HostKeywords",
    "HttpLimits",
    "HttpSettings",
    "Limits",
    "SecuritySettings",
    "ServerKeywords",
    "ServerSettings",
    "LEGACY_REMOVAL",
    "deprecated",
    "forward_engine_keyword",
    "legacy_keywords",
    "worker_count",
]

GRPC_LIBRARIES = ("grpcio", "grpclib")
DEFAULT_GRPC_LIBRARY = "grpcio"


@documented
@dataclasses.dataclass(frozen=True)
class HttpLimits(Settings):
    """Per-connection bounds of the HTTP listener (defaults suit any client we know of;
    docs/security.md lists them under "Always on")."""

    max_head_bytes: int = setting(16 * 1024, "Request line plus headers, in bytes (414/431 beyond).", **integer(1))
    max_headers: int = setting(100, "Header lines of one request (431 beyond).", **integer(1))
    head_timeout_s: float = setting(
        10.0, "A request head not complete within this many seconds is answered 408 (slowloris).", **seconds()
    )
    body_timeout_s: float = setting(60.0, "A request body must arrive within this many seconds.", **seconds())
    ws_send_timeout_s: float = setting(
        20.0,
        "A WebSocket send that cannot drain within this many seconds (a client that does not read) "
        "drops the connection.",
        **seconds(),
    )
    message_timeout_s: float = setting(
        30.0,
        "A WebSocket message not complete within this many seconds of its first byte closes "
        "the connection with 1008 (its bytes are freed).",
        **seconds(),
    )
    unfinished_bytes: int = setting(
        64 * 1024 * 1024,
        "Bytes of unfinished WebSocket messages every connection of the process may hold together; "
        "a connection that would take more is closed with 1009.",
        **integer(1),
    )
    unfinished_bytes_per_client: int = setting(
        16 * 1024 * 1024,
        "Bytes of unfinished WebSocket messages the connections of one client address may hold together (1009 beyond).",
        **integer(1),
    )


@documented
@dataclasses.dataclass(frozen=True)
class HttpSettings(Settings):
    """The HTTP side's transport (OpenEnv's ``/ws``, ``/mcp``, ``/health``...; docs/bridge.md).

    What users may rely on: the fields below; who may connect is :class:`SecuritySettings`'
    (shared with gRPC), not these.
    """

    ws_ping_interval: float | None = setting(
        20.0,
        "Seconds between keepalive pings on every WebSocket (None or 0: none); a peer that does "
        "not answer within ``ws_ping_timeout`` is dropped, which frees a half-open session's slot.",
        **seconds(optional=True),
    )
    ws_ping_timeout: float | None = setting(
        20.0, "Seconds to wait for a keepalive pong (None or 0: forever).", **seconds(optional=True)
    )
    ws_compression: bool = setting(
        False, "Negotiate permessage-deflate (off: small frames are cheaper raw).", **boolean()
    )
    max_message_bytes: int | None = setting(
        None,
        "Largest WebSocket message, ``POST /mcp`` body and reply (None: the server's "
        "``Limits.max_message_bytes``, as on gRPC).",
        **integer(1, optional=True),
    )
    max_connections: int = setting(4096, "Concurrent connections, WebSockets included (503 beyond).", **integer(1))
    keepalive_timeout_s: float = setting(
        5.0, "An idle keep-alive connection is closed after this many seconds.", **seconds()
    )
    limits: HttpLimits = setting(
        HttpLimits(),
        "Request-head size and read deadlines (:class:`HttpLimits`).",
        check=lambda v: isinstance(v, HttpLimits),
        expect="an HttpLimits",
    )


_SUBSETTINGS: dict[str, type[Settings]] = {"limits": Limits, "security": SecuritySettings, "http": HttpSettings}


@documented
@dataclasses.dataclass(frozen=True)
class ServerSettings(Settings):
    """How a server serves: everything but where it listens (frozen; :meth:`replace` makes a
    changed copy). ``openenv.Host(factory, host, port, http_port=..., settings=...)`` and
    ``openenv.serve(...)`` take it; ``openenv serve`` builds one from its options.

    What users may rely on: the fields below and those of the objects it holds, their names,
    defaults and meaning; a bad value raises ``ValueError`` naming the field when built; the
    same settings given as an object or as the older keyword arguments serve identically.
    """

    limits: Limits = setting(
        Limits(),
        "What the server allows (:class:`~openenv.runtime.limits.Limits`).",
        check=lambda v: isinstance(v, Limits),
        expect="a Limits",
    )
    security: SecuritySettings = setting(
        SecuritySettings(),
        "Who may reach the listeners (:class:`~openenv.security.SecuritySettings`).",
        check=lambda v: isinstance(v, SecuritySettings),
        expect="a SecuritySettings",
    )
    http: HttpSettings = setting(
        HttpSettings(),
        "The HTTP side's transport (:class:`HttpSettings`).",
        check=lambda v: isinstance(v, HttpSettings),
        expect="an HttpSettings",
    )
    grpc_library: Literal["grpcio", "grpclib"] = setting(
        DEFAULT_GRPC_LIBRARY,
        "The library that serves gRPC: ``grpcio`` (grpc.aio, the reference) or ``grpclib`` "
        "(the grpclib extra); the same protocol either way (docs/performance.md).",
        **one_of(GRPC_LIBRARIES),
    )
    reflection: bool = setting(True, "Serve gRPC server reflection.", **boolean())
    metrics: bool = setting(
        True, "Count metrics (``/metrics`` on the HTTP side; needs prometheus-client).", **boolean()
    )
    workers: int | Literal["auto"] = setting(
        1,
        "Server processes sharing the listeners' ports (SO_REUSEPORT; one per core with ``auto``); "
        "a session lives in the worker that accepted its connection, limits such as ``max_sessions`` "
        "apply per worker, a worker that dies is restarted (losing only its sessions), and load, health "
        "and metrics report the whole server and each worker (docs/performance.md, Workers).",
        convert=lambda v: worker_count(v, resolve=False),
        check=lambda v: v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
        expect='an integer >= 1 or "auto"',
    )
    web: bool | None = setting(
        None,
        "Serve the ``/web`` playground (None: only when the HTTP side listens on loopback; it lets "
        "anyone who reaches the port play).",
        check=lambda v: v is None or isinstance(v, bool),
        expect="True, False or None",
    )

    @classmethod
    def of(cls, settings: ServerSettings | None, keywords: Mapping[str, Any]) -> ServerSettings:
        """``settings`` (default: all defaults) with ``keywords`` applied: each keyword is a
        field name of this class or of one it holds (``max_sessions``, ``tokens``, ...), or
        ``engine``, the deprecated name of ``grpc_library``. The one place where the keyword
        arguments of ``Host``/``Server``/``serve`` map onto the settings."""
        base = settings if settings is not None else cls()
        kw = dict(keywords)
        forward_engine_keyword(kw, stacklevel=4)  # usually done by the public caller already
        parts: dict[str, dict[str, Any]] = {name: {} for name in _SUBSETTINGS}
        own: dict[str, Any] = {}
        for key, value in kw.items():
            holder = next((name for name, c in _SUBSETTINGS.items() if key in c.names()), None)
            if holder is not None:
                parts[holder][key] = value
            elif key in cls.names() - _SUBSETTINGS.keys():
                own[key] = value
            else:
                raise TypeError(f"unexpected keyword argument {key!r}")
        for name, changes in parts.items():
            if changes:
                own[name] = getattr(base, name).replace(**changes)
        return base.replace(**own) if own else base

    def http_message_bytes(self) -> int:
        """The HTTP side's message bound: its own, else the server's."""
        return self.http.max_message_bytes or self.limits.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES


def worker_count(value: Any, *, resolve: bool = True) -> Any:
    """A ``workers`` value as given (an int, a decimal string, ``"auto"``) as an int, or as
    ``"auto"`` when ``resolve`` is false; ``"auto"`` resolves to the cores this process may run
    on. A ValueError (or TypeError) for anything else."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            if not resolve:
                return "auto"
            try:
                return max(1, len(os.sched_getaffinity(0)))
            except (AttributeError, OSError):  # not Linux
                return max(1, os.cpu_count() or 1)
        if not text.isdecimal():
            raise ValueError(f"{value!r} is neither a number nor auto")
        return int(text)
    return value


LEGACY_REMOVAL = "0.3"
"""The release that removes the keyword arguments predating the settings objects
(:func:`legacy_keywords`); docs/security.md says the same."""


def deprecated(what: str, instead: str, stacklevel: int = 3) -> None:
    """The one warning of what predates the settings objects: ``DeprecationWarning`` that
    ``what`` is removed in openenv :data:`LEGACY_REMOVAL`, to be replaced by ``instead``,
    attributed ``stacklevel`` frames up."""
    warnings.warn(
        f"{what} is deprecated and is removed in openenv {LEGACY_REMOVAL}: give {instead} "
        "(docs/security.md, In Python: settings objects)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def legacy_keywords(
    owner: str, settings: ServerSettings | None, keywords: Mapping[str, Any], stacklevel: int = 3
) -> ServerSettings:
    """The one route of the keyword arguments that predate the settings objects
    (``Host(Env, max_sessions=8)``, ``Engine(manager, tokens=...)``...): ``settings`` with
    ``keywords`` applied (:meth:`ServerSettings.of`), after a ``DeprecationWarning`` naming
    ``owner``, the keywords, the settings to give instead and the release that removes them
    (:data:`LEGACY_REMOVAL`), attributed ``stacklevel`` frames up (the caller of ``owner``).
    Besides field names: ``engine`` (``grpc_library``) and ``http_options`` (an
    :class:`openenv.http.HttpOptions`: its transport fields become ``settings.http``, its
    origins and hosts ``settings.security``'s; :class:`openenv.Host` keeps its tokens and TLS
    for the HTTP side alone, as they were)."""
    kw = dict(keywords)
    names = ", ".join(f"{k}=" for k in sorted(kw))
    renamed = " (engine= is grpc_library: openenv.engine.Engine is the protocol engine)" if "engine" in kw else ""
    deprecated(
        f"{owner}({names})", "settings=ServerSettings(...) instead of keyword arguments" + renamed, stacklevel + 1
    )
    if "engine" in kw:  # the older name of grpc_library (told above, not twice)
        engine = kw.pop("engine")
        if kw.setdefault("grpc_library", engine) != engine:
            raise ValueError(f"engine={engine!r} and grpc_library={kw['grpc_library']!r} disagree")
    opts = kw.pop("http_options", None)
    settings = ServerSettings.of(settings, kw)
    if opts is not None:  # an openenv.http.HttpOptions: its transport, origins and hosts
        security = settings.security.replace(
            allowed_origins=opts.allowed_origins or settings.security.allowed_origins,
            allowed_hosts=opts.allowed_hosts or settings.security.allowed_hosts,
        )
        settings = settings.replace(http=opts.settings(), security=security)
    return settings


def forward_engine_keyword(keywords: dict[str, Any], stacklevel: int = 3) -> None:
    """Rename a deprecated ``engine`` keyword to ``grpc_library`` in place, with a
    ``DeprecationWarning`` attributed ``stacklevel`` frames up (the caller of the public
    function that called this); a ValueError when both are given and disagree."""
    if "engine" not in keywords:
        return
    engine = keywords.pop("engine")
    warnings.warn(
        "engine= is deprecated: the library serving gRPC is grpc_library= "
        "(openenv.engine.Engine is the protocol engine)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    if keywords.setdefault("grpc_library", engine) != engine:
        raise ValueError(f"engine={engine!r} and grpc_library={keywords['grpc_library']!r} disagree")


class ServerKeywords(LimitKeywords, total=False):
    """The keyword arguments of :class:`openenv.Server` (fields of :class:`ServerSettings`)."""

    reflection: bool
    tokens: TokenSet | None
    tls: TlsConfig | None


class HostKeywords(ServerKeywords, total=False):
    """The keyword arguments of :class:`openenv.Host` and :func:`openenv.serve` (fields of
    :class:`ServerSettings`, ``engine`` (deprecated) and ``http_options``)."""

    allow_anonymous: bool
    metrics: bool
    web: bool | None
    grpc_library: Literal["grpcio", "grpclib"]
    workers: int | Literal["auto"]
    engine: str
    http_options: Any
