"""``openenv serve TARGET``: an environment's gRPC listener and HTTP side, until SIGTERM.

The options build one :class:`~openenv.settings.ServerSettings` (:func:`settings_of`); the
defaults and help of those that set a settings field are taken from the field, so the CLI and
the API cannot drift apart.
"""

from __future__ import annotations

import os
from typing import Any

import click

from openenv.cli.common import (
    check_port_free,
    load_factory,
    load_security,
    security_options,
    split_list,
    write_ready_file,
)
from openenv.host import DEFAULT, Host, default_http_port, http_available, serve
from openenv.runtime.limits import SettingError, field_default, field_doc
from openenv.security import SecuritySettings
from openenv.settings import GRPC_LIBRARIES, HttpSettings, Limits, ServerSettings
from openenv.workers import WorkerFactory

__all__ = ["serve_command", "settings_of"]

MIB = 1024 * 1024

#: settings field -> the option that sets it (to name the option in a refusal).
OPTION_OF = {
    "max_sessions": "--max-sessions",
    "max_sessions_per_client": "--max-sessions-per-client",
    "max_message_bytes": "--max-message-mb",
    "idle_timeout_s": "--idle-timeout",
    "resume_grace_s": "--resume-grace",
    "handshake_timeout_s": "--handshake-timeout",
    "max_pipelined_requests": "--max-pipelined-requests",
    "isolation": "--isolation",
    "inline_threshold_s": "--inline-threshold-us",
    "tools_only": "--tools-only",
    "ws_ping_interval": "--ws-ping-interval",
    "ws_ping_timeout": "--ws-ping-timeout",
    "grpc_library": "--grpc-library",
    "allowed_origins": "--allowed-origins",
    "allowed_hosts": "--allowed-hosts",
    "workers": "--workers",
    "max_connections": "--max-connections",
}


def _doc(cls: Any, name: str, unit: str = "") -> str:
    """A field's documentation as an option's help (``unit``: how the option differs)."""
    return field_doc(cls, name).replace("``", "") + (f" This option: {unit}." if unit else "")


def settings_of(
    *,
    max_sessions: int | None,
    idle_timeout: float,
    resume_grace: float,
    max_message_mb: float,
    tools_only: bool,
    ws_ping_interval: float,
    ws_ping_timeout: float,
    handshake_timeout: float,
    isolation: str,
    max_sessions_per_client: int,
    inline_threshold_us: float | None,
    grpc_library: str,
    max_pipelined_requests: int,
    tokens: Any,
    tls: Any,
    allow_anonymous: bool,
    allowed_origins: str,
    allowed_hosts: str,
    web: bool | None,
    metrics: bool,
    workers: str = "1",
    max_connections: int | None = None,
) -> ServerSettings:
    """The :class:`ServerSettings` of ``openenv serve``'s options (in their units: MiB,
    microseconds); a value a setting refuses is a usage error naming the option."""
    try:
        return ServerSettings(
            limits=Limits(
                max_sessions=max_sessions,
                max_sessions_per_client=max_sessions_per_client,
                max_message_bytes=int(max_message_mb * MIB),
                idle_timeout_s=idle_timeout,
                resume_grace_s=resume_grace,
                handshake_timeout_s=handshake_timeout or None,
                max_pipelined_requests=max_pipelined_requests,
                isolation=isolation,  # type: ignore[arg-type]  # checked by Limits
                inline_threshold_s=None if inline_threshold_us is None else inline_threshold_us / 1e6,
                tools_only=tools_only,
            ),
            security=SecuritySettings(
                tokens=tokens,
                tls=tls,
                allow_anonymous=allow_anonymous,
                allowed_origins=split_list(allowed_origins),
                allowed_hosts=split_list(allowed_hosts),
            ),
            http=HttpSettings(
                ws_ping_interval=ws_ping_interval,
                ws_ping_timeout=ws_ping_timeout,
                max_connections=field_default(HttpSettings, "max_connections")
                if max_connections is None
                else max_connections,
            ),
            grpc_library=grpc_library,  # type: ignore[arg-type]  # checked by ServerSettings
            web=web,
            metrics=metrics,
            workers=workers,  # type: ignore[arg-type]  # converted and checked by ServerSettings
        )
    except SettingError as e:
        raise click.BadParameter(str(e), param_hint=OPTION_OF.get(e.field, e.field)) from None


@click.command("serve")
@click.argument("target")
@click.option(
    "--host",
    default=lambda: os.environ.get("OPENENV_HOST", "127.0.0.1"),
    show_default="127.0.0.1",
    help="Interface to listen on (0.0.0.0 in containers).",
)
@click.option(
    "--port",
    type=int,
    default=lambda: int(os.environ.get("OPENENV_GRPC_PORT", "50051")),
    show_default="50051",
    help="gRPC port (0 picks a free one).",
)
@click.option(
    "--max-sessions",
    type=int,
    default=lambda: int(os.environ["OPENENV_MAX_SESSIONS"]) if os.environ.get("OPENENV_MAX_SESSIONS") else None,
    show_default="$OPENENV_MAX_SESSIONS, else the environment's",
    help=_doc(Limits, "max_sessions", "fleets set it per server"),
)
@click.option(
    "--idle-timeout",
    type=float,
    default=field_default(Limits, "idle_timeout_s"),
    show_default=True,
    help=_doc(Limits, "idle_timeout_s"),
)
@click.option(
    "--resume-grace",
    type=float,
    default=field_default(Limits, "resume_grace_s"),
    show_default=True,
    help=_doc(Limits, "resume_grace_s"),
)
@click.option(
    "--max-message-mb",
    type=float,
    default=field_default(Limits, "max_message_bytes") / MIB,
    show_default=True,
    help=_doc(Limits, "max_message_bytes", "MiB"),
)
@click.option("--grace", type=float, default=10.0, show_default=True, help="Drain time on SIGTERM.")
@click.option("--tools-only", is_flag=True, help=_doc(Limits, "tools_only"))
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the bound address here once serving (for supervisors and tests).",
)
@click.option(
    "--http-port",
    type=int,
    default=None,
    show_default="$PORT, else 8000 (a free port with --port 0)",
    help="Port of the HTTP side: OpenEnv's /ws, /mcp, /health (the Hugging Face Space path).",
)
@click.option("--http-host", default=None, show_default="--host", help="Interface of the HTTP side.")
@click.option("--no-http", is_flag=True, help="Serve gRPC only.")
@click.option(
    "--http-ready-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the HTTP side's URL here once serving.",
)
@click.option(
    "--binary-port",
    type=click.IntRange(min=0),
    default=None,
    help="Also serve the binary WebSocket transport (ws://HOST:PORT/v1/session, RFC 0011) on a picows "
    "listener of its own on this port (0: a free port), on --http-host; off by default (/v1/session on "
    "the HTTP port serves the same transport). Takes the server's tokens and TLS.",
)
@click.option(
    "--binary-ready-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the binary listener's URL (ws(s)://host:port/v1/session) here once serving.",
)
@click.option(
    "--ws-ping-interval",
    type=float,
    default=field_default(HttpSettings, "ws_ping_interval"),
    show_default=True,
    help=_doc(HttpSettings, "ws_ping_interval"),
)
@click.option(
    "--ws-ping-timeout",
    type=float,
    default=field_default(HttpSettings, "ws_ping_timeout"),
    show_default=True,
    help=_doc(HttpSettings, "ws_ping_timeout"),
)
@click.option(
    "--handshake-timeout",
    type=float,
    default=field_default(Limits, "handshake_timeout_s"),
    show_default=True,
    help=_doc(Limits, "handshake_timeout_s"),
)
@click.option(
    "--isolation",
    type=click.Choice(["thread", "process"]),
    default=lambda: os.environ.get("OPENENV_ISOLATION", field_default(Limits, "isolation")),
    show_default=f"$OPENENV_ISOLATION, else {field_default(Limits, 'isolation')}",
    help=_doc(Limits, "isolation"),
)
@click.option(
    "--max-sessions-per-client",
    type=click.IntRange(min=0),
    default=lambda: int(
        os.environ.get("OPENENV_MAX_SESSIONS_PER_CLIENT", field_default(Limits, "max_sessions_per_client"))
    ),
    show_default=f"$OPENENV_MAX_SESSIONS_PER_CLIENT, else {field_default(Limits, 'max_sessions_per_client')}",
    help=_doc(Limits, "max_sessions_per_client"),
)
@click.option(
    "--inline-threshold-us",
    type=click.FloatRange(min=0),
    default=None,
    show_default="$OPENENV_INLINE_THRESHOLD_US, else 50",
    help=_doc(Limits, "inline_threshold_s", "microseconds"),
)
@click.option(
    "--grpc-library",
    # --engine: its name before the protocol engine (openenv.engine) took the word; kept working.
    "--engine",
    "grpc_library",
    type=click.Choice(GRPC_LIBRARIES),
    default=lambda: os.environ.get("OPENENV_ENGINE", field_default(ServerSettings, "grpc_library")),
    show_default=f"$OPENENV_ENGINE, else {field_default(ServerSettings, 'grpc_library')}",
    help=_doc(ServerSettings, "grpc_library", "--engine is its older name"),
)
@click.option(
    "--max-connections",
    type=int,
    default=field_default(HttpSettings, "max_connections"),
    show_default=True,
    help=_doc(HttpSettings, "max_connections", "per worker; the HTTP and the binary listener each"),
)
@click.option(
    "--workers",
    default=lambda: os.environ.get("OPENENV_WORKERS", str(field_default(ServerSettings, "workers"))),
    show_default=f"$OPENENV_WORKERS, else {field_default(ServerSettings, 'workers')}",
    metavar="N|auto",
    help=_doc(ServerSettings, "workers"),
)
@click.option(
    "--max-pipelined-requests",
    type=click.IntRange(min=0),
    default=field_default(Limits, "max_pipelined_requests"),
    show_default=True,
    help=_doc(Limits, "max_pipelined_requests"),
)
@security_options
@click.option(
    "--web/--no-web",
    default=None,
    show_default="on when the HTTP side listens on loopback",
    help=_doc(ServerSettings, "web"),
)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Also serve /metrics (Prometheus) on this port (the HTTP side always has /metrics).",
)
def serve_command(
    target: str,
    host: str,
    port: int,
    max_sessions: int | None,
    idle_timeout: float,
    resume_grace: float,
    max_message_mb: float,
    grace: float,
    tools_only: bool,
    ready_file: str | None,
    http_port: int | None,
    http_host: str | None,
    no_http: bool,
    http_ready_file: str | None,
    binary_port: int | None,
    binary_ready_file: str | None,
    ws_ping_interval: float,
    ws_ping_timeout: float,
    handshake_timeout: float,
    isolation: str,
    max_sessions_per_client: int,
    inline_threshold_us: float | None,
    grpc_library: str,
    max_connections: int,
    workers: str,
    max_pipelined_requests: int,
    tokens: tuple[str, ...],
    token_file: str | None,
    allow_anonymous: bool,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    allowed_origins: str,
    allowed_hosts: str,
    web: bool | None,
    metrics_port: int | None,
) -> None:
    """Serve TARGET (module:Class) over gRPC and HTTP/WebSocket until SIGTERM, then drain.

    The HTTP side (OpenEnv's /ws, /mcp, /health) needs the http extra; without it, and
    without --http-port, the server runs gRPC only and says so.

    With a token (--token, --token-file, $OPENENV_TOKEN) every request but health checks
    needs it; a non-loopback --host needs one, or --allow-anonymous (docs/security.md)."""
    factory = load_factory(target)
    token_set, tls = load_security(tokens, token_file, tls_cert, tls_key, tls_client_ca)

    def ready(h: Host) -> None:
        for line in h.describe():
            click.echo(line, err=True)
        if ready_file and h.address:
            write_ready_file(ready_file, h.address)
        if http_ready_file and h.http_url:
            write_ready_file(http_ready_file, h.http_url)
        if binary_ready_file and h.binary_url:
            write_ready_file(binary_ready_file, h.binary_url)

    listen: dict[str, Any] = {"http_port": None}
    if not no_http:
        if http_port is None and not http_available():
            listen = {"http_port": DEFAULT}
        else:
            if not http_available():
                raise click.ClickException("--http-port needs the http extra: pip install 'protoenv[http]'")
            listen = {"http_port": default_http_port(port) if http_port is None else http_port, "http_host": http_host}
    # Metrics nobody can scrape (no HTTP side, no metrics port) are not counted: an idle server
    # then need not import prometheus-client, and requests skip the counting.
    scrapeable = metrics_port is not None or listen["http_port"] not in (None, DEFAULT)
    settings = settings_of(
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        resume_grace=resume_grace,
        max_message_mb=max_message_mb,
        tools_only=tools_only,
        ws_ping_interval=ws_ping_interval,
        ws_ping_timeout=ws_ping_timeout,
        handshake_timeout=handshake_timeout,
        isolation=isolation,
        max_sessions_per_client=max_sessions_per_client,
        inline_threshold_us=inline_threshold_us,
        grpc_library=grpc_library,
        max_pipelined_requests=max_pipelined_requests,
        tokens=token_set,
        tls=tls,
        allow_anonymous=allow_anonymous,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        web=web,
        metrics=scrapeable,
        workers=workers,
        max_connections=max_connections,
    )
    check_port_free(host, port, "the gRPC side", "--port")
    if listen["http_port"] not in (None, DEFAULT):
        check_port_free(http_host or host, listen["http_port"], "the HTTP side", "--http-port")
    check_port_free(http_host or host, binary_port, "the binary WebSocket side", "--binary-port")
    check_port_free(http_host or host, metrics_port, "/metrics", "--metrics-port")
    try:
        serve(
            factory,
            host,
            port,
            settings=settings,
            grace_s=grace,
            ready=ready,
            metrics_port=metrics_port,
            binary_port=binary_port,
            worker_factory=WorkerFactory(load_factory, target),
            **listen,
        )
    except (TypeError, ValueError, RuntimeError, ImportError) as e:
        raise click.ClickException(str(e)) from e
