"""``openenv bridge``: OpenEnv's HTTP/WebSocket surface in front of a remote gRPC environment."""

from __future__ import annotations

import os
from typing import Any

import click

from openenv.cli.common import write_ready_file
from openenv.cli.setting_options import (
    SECURITY_OPTIONS,
    SettingOption,
    security_from,
    settings_from,
    settings_options,
)
from openenv.errors import EnvError
from openenv.host import serve_bridge

__all__ = ["LISTENER_OPTIONS", "SETTING_OPTIONS", "bridge_command"]

DEFAULT_HTTP_PORT = 8000  # OpenEnv's; Spaces set $PORT
MIB = 1024 * 1024

#: The options that set a settings field (the security ones: SECURITY_OPTIONS); type, default,
#: help and refusals come from the field (openenv.cli.setting_options).
HTTP_OPTIONS: tuple[SettingOption, ...] = (
    SettingOption("http", "ws_ping_interval", "--ws-ping-interval"),
    SettingOption("http", "ws_ping_timeout", "--ws-ping-timeout"),
    # None (the field's default): the server's Limits.max_message_bytes, 4 MiB, as before.
    SettingOption("http", "max_message_bytes", "--max-message-mb", scale=MIB, unit="MiB", show_default="4"),
)
WEB_OPTION = SettingOption("", "web", "--web", show_default="on when listening on loopback")
SETTING_OPTIONS: tuple[SettingOption, ...] = (*HTTP_OPTIONS, WEB_OPTION)

#: The options declared by hand, each with why: none is a server setting.
LISTENER_OPTIONS: dict[str, str] = {
    "host": "the interface to listen on: serve_bridge()'s host argument",
    "port": "the HTTP port: serve_bridge()'s port argument",
    "connect_timeout": "how long to wait for the target: serve_bridge()'s argument, a client's",
    "ready_file": "a file the command writes, not a server setting",
    "target_token": "the token the bridge sends as a client of its target, not a server setting",
    "target_ca": "the CA the bridge checks its target with, as a client, not a server setting",
}


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
@settings_options(HTTP_OPTIONS)
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
@settings_options(SECURITY_OPTIONS)
@settings_options((WEB_OPTION,))
def bridge_command(
    target: str,
    host: str,
    port: int,
    connect_timeout: float,
    ready_file: str | None,
    target_token: str | None,
    target_ca: str | None,
    web: bool | None,
    **values: Any,
) -> None:
    """Expose the gRPC environment at TARGET (grpc://HOST:PORT, any language) on OpenEnv's
    HTTP/WebSocket protocol: /ws, /mcp, /health, /metadata, /schema, /metrics, /web."""
    try:
        import openenv.http  # noqa: F401  # the http extra
    except ImportError as e:
        raise click.ClickException(f"openenv bridge needs the http extra: pip install 'protoenv[http]' ({e})") from None
    # --allow-anonymous is the bridge's own check (serve_bridge), not a field of its settings.
    security = security_from(values, allow_anonymous=False)
    settings = settings_from(SETTING_OPTIONS, values, security=security)

    def ready(server: Any) -> None:
        click.echo(f"bridging {target} on {server.url} (WebSocket {server.url}/ws)", err=True)
        if ready_file:
            write_ready_file(ready_file, server.url)

    try:
        serve_bridge(
            target,
            host,
            port,
            settings=settings,
            connect_timeout=connect_timeout,
            ready=ready,
            allow_anonymous=values["allow_anonymous"],
            token=target_token,
            ca_file=target_ca,
            web=web,
        )
    except (EnvError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
