"""``openenv bridge``: OpenEnv's HTTP/WebSocket surface in front of a remote gRPC environment."""

from __future__ import annotations

import os
from typing import Any

import click

from openenv.cli.common import load_security, security_options, split_list, write_ready_file
from openenv.errors import EnvError
from openenv.host import serve_bridge
from openenv.security import SecuritySettings
from openenv.settings import HttpSettings, ServerSettings

__all__ = ["bridge_command"]

DEFAULT_HTTP_PORT = 8000  # OpenEnv's; Spaces set $PORT


@click.command("bridge")
@click.argument("target")
@click.option(
    "--host",
    default=lambda: os.environ.get("OPENENV_HOST", "127.0.0.1"),
    show_default="127.0.0.1",
    help="Interface to listen on (0.0.0.0 in containers and Spaces).",
)
@click.option(
    "--port",
    type=int,
    default=lambda: int(os.environ.get("PORT", DEFAULT_HTTP_PORT)),
    show_default="$PORT, else 8000",
    help="HTTP port (0 picks a free one; Spaces use 7860).",
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
    "--max-message-mb",
    type=float,
    default=4.0,
    show_default=True,
    help="Largest message accepted and sent: a WebSocket message, a POST /mcp body, a reply (docs/security.md).",
)
@click.option(
    "--connect-timeout", type=float, default=30.0, show_default=True, help="How long to wait for the gRPC server."
)
@click.option(
    "--ready-file", type=click.Path(dir_okay=False), default=None, help="Write the bridge's URL here once serving."
)
@click.option(
    "--target-token",
    default=lambda: os.environ.get("OPENENV_TARGET_TOKEN"),
    help="Bearer token sent to the gRPC server (default $OPENENV_TARGET_TOKEN).",
)
@click.option(
    "--target-ca", type=click.Path(dir_okay=False), default=None, help="CA of a grpcs:// target's certificate."
)
@security_options
@click.option(
    "--web/--no-web",
    default=None,
    show_default="on when listening on loopback",
    help="Serve the /web playground.",
)
def bridge_command(
    target: str,
    host: str,
    port: int,
    ws_ping_interval: float,
    ws_ping_timeout: float,
    max_message_mb: float,
    connect_timeout: float,
    ready_file: str | None,
    target_token: str | None,
    target_ca: str | None,
    tokens: tuple[str, ...],
    token_file: str | None,
    allow_anonymous: bool,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    allowed_origins: str,
    allowed_hosts: str,
    web: bool | None,
) -> None:
    """Expose the gRPC environment at TARGET (grpc://HOST:PORT, any language) on OpenEnv's
    HTTP/WebSocket protocol: /ws, /mcp, /health, /metadata, /schema, /metrics, /web."""
    try:
        import openenv.http  # noqa: F401  # the http extra
    except ImportError as e:
        raise click.ClickException(f"openenv bridge needs the http extra: pip install 'protoenv[http]' ({e})") from None
    token_set, tls = load_security(tokens, token_file, tls_cert, tls_key, tls_client_ca)

    def ready(server: Any) -> None:
        click.echo(f"bridging {target} on {server.url} (WebSocket {server.url}/ws)", err=True)
        if ready_file:
            write_ready_file(ready_file, server.url)

    try:
        settings = ServerSettings(
            http=HttpSettings(
                ws_ping_interval=ws_ping_interval,
                ws_ping_timeout=ws_ping_timeout,
                max_message_bytes=int(max_message_mb * 1024 * 1024),
            ),
            security=SecuritySettings(
                tokens=token_set,
                tls=tls,
                allowed_origins=split_list(allowed_origins),
                allowed_hosts=split_list(allowed_hosts),
            ),
        )
        serve_bridge(
            target,
            host,
            port,
            settings=settings,
            connect_timeout=connect_timeout,
            ready=ready,
            allow_anonymous=allow_anonymous,
            token=target_token,
            ca_file=target_ca,
            web=web,
        )
    except (EnvError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
