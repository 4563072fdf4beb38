"""``openenv serve TARGET``: an environment's gRPC listener and HTTP side, until SIGTERM."""

from __future__ import annotations

import os
from typing import Any

import click

from openenv.cli.common import load_factory, load_security, security_options, split_list, write_ready_file
from openenv.host import DEFAULT, Host, default_http_port, http_available, serve

__all__ = ["serve_command"]


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
    help="Capacity: concurrent sessions (fleets set it per server).",
)
@click.option(
    "--idle-timeout",
    type=float,
    default=300.0,
    show_default=True,
    help="Close sessions idle for this many seconds (0 disables).",
)
@click.option(
    "--resume-grace",
    type=float,
    default=60.0,
    show_default=True,
    help="Keep a resumable session whose connection dropped this many seconds for its client (0: no resumption).",
)
@click.option(
    "--max-message-mb",
    type=float,
    default=4.0,
    show_default=True,
    help="Largest message accepted and sent, on every listener; a larger reply is an in-band RESOURCE_EXHAUSTED. "
    "Each message may cost up to ~10x its size to parse (docs/security.md).",
)
@click.option("--grace", type=float, default=10.0, show_default=True, help="Drain time on SIGTERM.")
@click.option("--tools-only", is_flag=True, help="Production mode: only tools are reachable.")
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
    "--ws-ping-interval",
    type=float,
    default=20.0,
    show_default=True,
    help="WebSocket keepalive ping interval in seconds (0 disables).",
)
@click.option(
    "--ws-ping-timeout",
    type=float,
    default=20.0,
    show_default=True,
    help="Drop a WebSocket whose pong takes longer (frees half-open sessions).",
)
@click.option(
    "--handshake-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="End gRPC streams that have not handshaken within this many seconds (0 disables).",
)
@click.option(
    "--isolation",
    type=click.Choice(["thread", "process"]),
    default=lambda: os.environ.get("OPENENV_ISOLATION", "thread"),
    show_default="thread",
    help="process: each session's environment in its own worker process (a crash loses only that session).",
)
@click.option(
    "--max-sessions-per-client",
    type=click.IntRange(min=0),
    default=lambda: int(os.environ.get("OPENENV_MAX_SESSIONS_PER_CLIENT", "0")),
    show_default="$OPENENV_MAX_SESSIONS_PER_CLIENT, else 0: no limit",
    help="Sessions one client address may hold at once, over both listeners (beyond: RESOURCE_EXHAUSTED).",
)
@click.option(
    "--inline-threshold-us",
    type=click.FloatRange(min=0),
    default=None,
    show_default="$OPENENV_INLINE_THRESHOLD_US, else 50",
    help="Sync environment hooks measured consistently faster than this many microseconds run on the "
    "event loop instead of a worker thread (0: never; docs/performance.md).",
)
@click.option(
    "--engine",
    type=click.Choice(["grpcio", "grpclib"]),
    default=lambda: os.environ.get("OPENENV_ENGINE", "grpcio"),
    show_default="$OPENENV_ENGINE, else grpcio",
    help="Library of the gRPC listener: grpcio (grpc.aio, the reference) or grpclib (the grpclib extra; "
    "same protocol, docs/performance.md).",
)
@click.option(
    "--max-pipelined-requests",
    type=click.IntRange(min=0),
    default=256,
    show_default=True,
    help="The most requests one pipelined gRPC message may carry (RFC 0009); 0: not offered, clients send "
    "each request alone.",
)
@security_options
@click.option(
    "--web/--no-web",
    default=None,
    show_default="on when the HTTP side listens on loopback",
    help="Serve the /web playground (off by default on other interfaces: it lets anyone who reaches the port play).",
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
    ws_ping_interval: float,
    ws_ping_timeout: float,
    handshake_timeout: float,
    isolation: str,
    max_sessions_per_client: int,
    inline_threshold_us: float | None,
    engine: str,
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

    http: dict[str, Any] = {"http_port": None}
    if not no_http:
        if http_port is None and not http_available():
            http = {"http_port": DEFAULT}
        else:
            try:
                from openenv.bridge import HttpOptions  # the http extra
            except ImportError as e:
                raise click.ClickException(
                    f"--http-port needs the http extra: pip install 'protoenv[http]' ({e})"
                ) from None
            http = {
                "http_port": default_http_port(port) if http_port is None else http_port,
                "http_host": http_host,
                "http_options": HttpOptions(
                    ws_ping_interval=ws_ping_interval,
                    ws_ping_timeout=ws_ping_timeout,
                    max_message_bytes=int(max_message_mb * 1024 * 1024),
                    allowed_origins=split_list(allowed_origins),
                    allowed_hosts=split_list(allowed_hosts),
                ),
            }
    # Metrics nobody can scrape (no HTTP side, no metrics port) are not counted: an idle server
    # then need not import prometheus-client, and requests skip the counting.
    scrapeable = metrics_port is not None or http["http_port"] not in (None, DEFAULT)
    try:
        serve(
            factory,
            host,
            port,
            max_sessions=max_sessions,
            idle_timeout_s=idle_timeout,
            resume_grace_s=resume_grace,
            max_message_bytes=int(max_message_mb * 1024 * 1024),
            grace_s=grace,
            tools_only=tools_only,
            ready=ready,
            tokens=token_set,
            tls=tls,
            allow_anonymous=allow_anonymous,
            handshake_timeout_s=handshake_timeout or None,
            isolation=isolation,
            max_sessions_per_client=max_sessions_per_client,
            inline_threshold_s=None if inline_threshold_us is None else inline_threshold_us * 1e-6,
            engine=engine,
            max_pipelined_requests=max_pipelined_requests,
            web=web,
            metrics_port=metrics_port,
            metrics=scrapeable,
            **http,
        )
    except (TypeError, ValueError, RuntimeError, ImportError) as e:
        raise click.ClickException(str(e)) from e
