"""``openenv health [URL]``: exit 0 when an environment server's gRPC health is SERVING.

Used by the HEALTHCHECK of environment images (docs/images.md); also handy in scripts.
Without URL it checks ``127.0.0.1:$OPENENV_GRPC_PORT`` (default 50051), over TLS when the
server's own ``$OPENENV_TLS_CERT`` is set (trusting ``$OPENENV_TLS_CA``, else that
certificate; the certificate must name ``localhost`` or ``$OPENENV_TLS_SERVER_NAME``; with
``$OPENENV_TLS_CLIENT_CA`` it presents the server's certificate and key as its client
certificate, which that CA must have signed).
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
    env = os.environ
    tls_ca: str | None = None
    client_cert: tuple[str, str] | None = None
    if url:
        scheme, target = parse_url(url)
        if scheme == "grpcs":
            tls_ca = env.get("OPENENV_TLS_CA") or env.get("OPENENV_TLS_CERT") or ""
    else:
        target = f"127.0.0.1:{env.get('OPENENV_GRPC_PORT', '50051')}"
        if env.get("OPENENV_TLS_CERT"):  # the image's own server speaks TLS (RFC 0003)
            target = f"localhost:{env.get('OPENENV_GRPC_PORT', '50051')}"
            tls_ca = env.get("OPENENV_TLS_CA") or env["OPENENV_TLS_CERT"]
            if env.get("OPENENV_TLS_CLIENT_CA") and env.get("OPENENV_TLS_KEY"):
                client_cert = (env["OPENENV_TLS_CERT"], env["OPENENV_TLS_KEY"])
    status = check_health(
        target,
        service,
        timeout,
        tls_ca=tls_ca or None,
        client_cert=client_cert,
        server_name=env.get("OPENENV_TLS_SERVER_NAME") or None,
    )
    click.echo(status)
    if status != "SERVING":
        raise SystemExit(1)
