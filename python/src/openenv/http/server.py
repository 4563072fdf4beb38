"""The HTTP listener: uvicorn in the caller's event loop.

:class:`HttpServer` runs a :class:`~openenv.http.app.BridgeApp` on uvicorn inside the
running event loop (so ``openenv serve`` runs gRPC and HTTP side by side in one loop,
sharing one ``SessionManager``; :class:`openenv.Host` does that).

Why uvicorn: it is the most used ASGI server (OpenEnv's own servers run on it, so Spaces
and proxies are known to work with it), it parses HTTP with ``httptools`` and runs on
``uvloop``, and its ``websockets-sansio`` protocol does WebSocket framing with the
``websockets`` library's C-accelerated code, with keepalive pings built in. The bridge
is a raw ASGI callable, so no framework work is added per frame.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import uvicorn

from openenv.http.app import BridgeApp
from openenv.http.guard import Guard
from openenv.http.limits import HttpLimits, protocol_classes
from openenv.http.listener import UvicornListener, listen_backlog
from openenv.security import BrowserPolicy, SecuritySettings, TlsConfig, TokenSet
from openenv.security.auth import Authenticator
from openenv.settings import HttpSettings, ServerSettings, deprecated

log = logging.getLogger("openenv.http")

__all__ = ["DEFAULT_HTTP_PORT", "HttpOptions", "HttpServer"]

DEFAULT_HTTP_PORT = 8000
"""OpenEnv's port (its Docker providers map ``<host>:8000``); Spaces use ``PORT`` (7860)."""


class HttpOptions:
    """Deprecated, removed in 0.3 (a ``DeprecationWarning`` says so): what one HTTP listener
    applies, as a mutable object restating :class:`~openenv.settings.HttpSettings` and part of
    :class:`~openenv.security.SecuritySettings`. Give :class:`HttpServer` (and
    ``openenv.serve_bridge``) ``settings=ServerSettings(http=..., security=...)`` instead;
    :meth:`server_settings` is the same thing as settings.

    Attributes: ``ws_ping_interval``, ``ws_ping_timeout``, ``max_message_bytes``,
    ``ws_compression``, ``limits``, ``max_connections``, ``keepalive_timeout_s`` (the
    :class:`HttpSettings` fields of those names); ``tokens``, ``tls``, ``allowed_origins``,
    ``allowed_hosts`` (the :class:`SecuritySettings` fields).
    """

    def __init__(
        self,
        *,
        ws_ping_interval: float | None = 20.0,
        ws_ping_timeout: float | None = 20.0,
        max_message_bytes: int | None = None,
        ws_compression: bool = False,
        tokens: TokenSet | None = None,
        tls: TlsConfig | None = None,
        allowed_origins: tuple[str, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
        limits: HttpLimits | None = None,
        max_connections: int = 4096,
        keepalive_timeout_s: float = 5.0,
    ) -> None:
        deprecated("openenv.http.HttpOptions", "settings=ServerSettings(http=HttpSettings(...), security=...)")
        self.ws_ping_interval = ws_ping_interval or None
        self.ws_ping_timeout = ws_ping_timeout or None
        self.max_message_bytes = max_message_bytes
        self.ws_compression = ws_compression
        self.tokens = tokens or TokenSet()
        self.tls = tls
        self.allowed_origins, self.allowed_hosts = tuple(allowed_origins), tuple(allowed_hosts)
        self.limits = limits or HttpLimits()
        self.max_connections = max_connections
        self.keepalive_timeout_s = keepalive_timeout_s

    def settings(self) -> HttpSettings:
        """The :class:`~openenv.settings.HttpSettings` part of these options (checked)."""
        return HttpSettings(
            ws_ping_interval=self.ws_ping_interval,
            ws_ping_timeout=self.ws_ping_timeout,
            ws_compression=self.ws_compression,
            max_message_bytes=self.max_message_bytes,
            max_connections=self.max_connections,
            keepalive_timeout_s=self.keepalive_timeout_s,
            limits=self.limits,
        )

    def server_settings(self) -> ServerSettings:
        """These options as the settings an :class:`HttpServer` takes."""
        security = SecuritySettings(
            tokens=self.tokens, tls=self.tls, allowed_origins=self.allowed_origins, allowed_hosts=self.allowed_hosts
        )
        return ServerSettings(http=self.settings(), security=security)


def _uvicorn_config(app: Any, settings: ServerSettings) -> uvicorn.Config:
    http = settings.http
    http_protocol, ws_protocol = protocol_classes(http.limits)
    return uvicorn.Config(
        app,
        loop="none",
        http=http_protocol,
        ws=ws_protocol,
        lifespan="on",
        ws_max_size=settings.http_message_bytes(),
        ws_ping_interval=http.ws_ping_interval or None,
        ws_ping_timeout=http.ws_ping_timeout or None,
        ws_per_message_deflate=http.ws_compression,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        server_header=False,
        limit_concurrency=http.max_connections,
        timeout_keep_alive=max(1, round(http.keepalive_timeout_s)),
        **_tls_kwargs(settings.security.tls),
    )


def _tls_kwargs(tls: TlsConfig | None) -> dict[str, Any]:
    if tls is None:
        return {}

    tls.check()
    kw: dict[str, Any] = {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
    if tls.client_ca_file:
        kw.update(ssl_ca_certs=tls.client_ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return kw


class HttpServer:
    """A :class:`BridgeApp` served by uvicorn in the current event loop.

    ``await start()`` binds (port 0 picks a free port) and returns once accepting;
    ``await stop()`` closes connections and waits for the server to finish.
    """

    def __init__(
        self,
        app: BridgeApp,
        host: str = "127.0.0.1",
        port: int = DEFAULT_HTTP_PORT,
        options: HttpOptions | None = None,
        *,
        settings: ServerSettings | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        self.app = app
        if options is not None:  # deprecated (HttpOptions warned when it was made)
            settings = options.server_settings()
        #: How it serves: ``settings.http`` (transport), ``settings.security`` (tokens, TLS,
        #: origins and hosts), and its message bound, :meth:`ServerSettings.http_message_bytes`.
        self.settings = settings if settings is not None else ServerSettings()
        #: Who may call (:mod:`openenv.security.auth`): the server's, shared with its other
        #: listeners (:class:`openenv.Host` gives its engine's), else one of the settings' tokens.
        self.authenticator = (
            authenticator if authenticator is not None else Authenticator(self.settings.security.tokens)
        )
        self.host, self.requested_port = host, port
        self.port: int | None = None
        #: Bind with SO_REUSEPORT (several worker processes share the port; openenv.workers).
        self.reuse_port = False
        self._listener: UvicornListener | None = None

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the running server (loopback when bound to all interfaces)."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.settings.security.tls else 'http'}://{host}:{self.port}"

    async def start(self) -> HttpServer:
        security = self.settings.security
        if security.tls is not None:
            security.tls.check()  # before binding: a bad path fails cleanly
        browser = BrowserPolicy(security.allowed_origins, security.allowed_hosts, bind_host=self.host)
        self.app.browser = browser  # the MCP SDK's own DNS-rebinding protection follows it
        listener = UvicornListener(
            _uvicorn_config(Guard(self.app, self.authenticator, browser), self.settings),
            self.host,
            self.requested_port,
            reuse_port=self.reuse_port,
            backlog=listen_backlog(self.settings.http.max_connections),
        )
        await listener.start("HTTP ")
        self._listener, self.port = listener, listener.port
        return self

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()

    async def __aenter__(self) -> HttpServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
