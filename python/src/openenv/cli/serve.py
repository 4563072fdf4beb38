"""``openenv serve TARGET``: an environment's gRPC listener and HTTP side, until SIGTERM.

The options build one :class:`~openenv.settings.ServerSettings` (:func:`settings_of`); the
defaults and help of those that set a settings field are taken from the field, so the CLI and
the API cannot drift apart.
"""

from __future__ import annotations

import os
from typing import Any

import click

from openenv.cli.common import check_port_free, load_factory, write_ready_file
from openenv.cli.setting_options import (
    SECURITY_OPTIONS,
    SettingOption,
    security_from,
    settings_from,
    settings_options,
)
from openenv.host import DEFAULT, Host, default_http_port, http_available, serve
from openenv.settings import ServerSettings
from openenv.workers import WorkerFactory

__all__ = ["LISTENER_OPTIONS", "serve_command", "settings_of"]

MIB = 1024 * 1024

#: The options that set a settings field: only what the command line says differently; the
#: type, default, help and refusals come from the field (openenv.cli.setting_options).
SETTING_OPTIONS: tuple[SettingOption, ...] = (
    SettingOption(
        "limits",
        "max_sessions",
        "--max-sessions",
        env="OPENENV_MAX_SESSIONS",
        note="fleets set it per server",
        show_default="$OPENENV_MAX_SESSIONS, else the environment's",
    ),
    SettingOption("limits", "idle_timeout_s", "--idle-timeout"),
    SettingOption("limits", "resume_grace_s", "--resume-grace"),
    SettingOption("limits", "max_message_bytes", "--max-message-mb", scale=MIB, unit="MiB"),
    SettingOption("limits", "tools_only", "--tools-only"),
    SettingOption("http", "ws_ping_interval", "--ws-ping-interval"),
    SettingOption("http", "ws_ping_timeout", "--ws-ping-timeout"),
    SettingOption("limits", "handshake_timeout_s", "--handshake-timeout", zero_is_none=True),
    SettingOption("limits", "isolation", "--isolation", env="OPENENV_ISOLATION"),
    SettingOption(
        "limits",
        "max_sessions_per_client",
        "--max-sessions-per-client",
        env="OPENENV_MAX_SESSIONS_PER_CLIENT",
        click_type=click.IntRange(min=0),
    ),
    SettingOption(
        "limits",
        "inline_threshold_s",
        "--inline-threshold-us",
        divisor=1e6,
        unit="microseconds",
        click_type=click.FloatRange(min=0),
        show_default="$OPENENV_INLINE_THRESHOLD_US, else 50",
    ),
    SettingOption(
        "",
        "grpc_library",
        "--grpc-library",
        aliases=("--engine",),
        env="OPENENV_ENGINE",
        note="--engine is its older name",
    ),
    SettingOption(
        "http", "max_connections", "--max-connections", note="per worker; the HTTP and the binary listener each"
    ),
    SettingOption("", "workers", "--workers", env="OPENENV_WORKERS", click_type=str, metavar="N|auto"),
    SettingOption("limits", "max_pipelined_requests", "--max-pipelined-requests", click_type=click.IntRange(min=0)),
    SettingOption("", "web", "--web", show_default="on when the HTTP side listens on loopback"),
)


#: The options declared by hand, each with why: where and how long to listen is not a
#: setting (ServerSettings is "everything but where it listens"; Host and serve take these
#: as arguments), so there is no field to make them from.
LISTENER_OPTIONS: dict[str, str] = {
    "host": "the interface to listen on: serve()'s host argument",
    "port": "the gRPC port: serve()'s port argument",
    "grace": "drain time on SIGTERM: serve()'s grace_s argument",
    "ready_file": "a file the command writes, not a server setting",
    "http_port": "the HTTP port: serve()'s http_port argument",
    "http_host": "the HTTP interface: serve()'s http_host argument",
    "no_http": "whether the HTTP listener runs: serve()'s http_port=None",
    "http_ready_file": "a file the command writes, not a server setting",
    "binary_port": "the binary listener's port: serve()'s binary_port argument",
    "binary_ready_file": "a file the command writes, not a server setting",
    "metrics_port": "the /metrics port: serve()'s metrics_port argument",
}


def settings_of(values: dict[str, Any], *, metrics: bool) -> ServerSettings:
    """The :class:`ServerSettings` of ``openenv serve``'s option ``values`` (in their units:
    MiB, microseconds; the security options' files read and checked); a value a setting
    refuses is a usage error naming the option."""
    return settings_from(SETTING_OPTIONS, values, security=security_from(values), metrics=metrics)


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
@click.option("--grace", type=float, default=10.0, show_default=True, help="Drain time on SIGTERM.")
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
@settings_options(SECURITY_OPTIONS)
@settings_options(SETTING_OPTIONS)
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
    grace: float,
    ready_file: str | None,
    http_port: int | None,
    http_host: str | None,
    no_http: bool,
    http_ready_file: str | None,
    binary_port: int | None,
    binary_ready_file: str | None,
    metrics_port: int | None,
    **values: Any,
) -> None:
    """Serve TARGET (module:Class) over gRPC and HTTP/WebSocket until SIGTERM, then drain.

    The HTTP side (OpenEnv's /ws, /mcp, /health) needs the http extra; without it, and
    without --http-port, the server runs gRPC only and says so.

    With a token (--token, --token-file, $OPENENV_TOKEN) every request but health checks
    needs it; a non-loopback --host needs one, or --allow-anonymous (docs/security.md)."""
    factory = load_factory(target)

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
    settings = settings_of(values, metrics=scrapeable)
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
