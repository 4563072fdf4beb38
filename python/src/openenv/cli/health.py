"""``openenv health [URL]``: exit 0 when an environment server's gRPC health is SERVING.

Used by the HEALTHCHECK of environment images (docs/images.md); also handy in scripts.
Without URL it checks ``127.0.0.1:$OPENENV_GRPC_PORT`` (default 50051).
"""

from __future__ import annotations

import os

import click

from openenv.client.health import check_health
from openenv.client.urls import parse_url

__all__ = ["health_command"]


@click.command("health")
@click.argument("url", required=False)
@click.option("--service", default="", help='Service name to check ("" is the whole server).')
@click.option("--timeout", type=float, default=3.0, show_default=True, help="Seconds to wait for the answer.")
def health_command(url: str | None, service: str, timeout: float) -> None:
    """Exit 0 if the server at URL (default 127.0.0.1:$OPENENV_GRPC_PORT) is SERVING, else 1."""
    target = parse_url(url)[1] if url else f"127.0.0.1:{os.environ.get('OPENENV_GRPC_PORT', '50051')}"
    status = check_health(target, service, timeout)
    click.echo(status)
    if status != "SERVING":
        raise SystemExit(1)
