"""The ``openenv`` command line.

Commands live in the modules that own them and are registered in ``_COMMANDS``
(``name -> "module:attribute"``), imported only when used, so ``openenv --help`` stays
fast. Other distributions add commands through the ``openenv.cli`` entry-point group
(e.g. ``openenv certify`` from openenv-conformance).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import sys
from typing import Any

import click

_COMMANDS: dict[str, str] = {
    "serve": "openenv.cli:serve_command",
    "info": "openenv.cli:info_command",
    "bridge": "openenv.bridge.cli:bridge_command",
    "push": "openenv.spaces:push_command",
    "build": "openenv.images:build_command",
    "ps": "openenv.images:ps_command",
    "cleanup": "openenv.images:cleanup_command",
    "health": "openenv.healthcheck:health_command",
    "init": "openenv.scaffold:init_command",
}


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.cli")}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(_entry_points()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _COMMANDS:
            mod, attr = _COMMANDS[name].split(":")
            return getattr(importlib.import_module(mod), attr)
        ep = _entry_points().get(name)
        return ep.load() if ep is not None else None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="openenv", prog_name="openenv")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Protocol-first agentic RL environments: serve, inspect, certify, build."""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def write_ready_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically, so a supervisor polling for it never reads half."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_factory(spec: str) -> Any:
    """Import ``module:Attribute`` (an Environment subclass or a factory function)."""
    if ":" not in spec:
        raise click.BadParameter(f"{spec!r} is not of the form module:Class", param_hint="TARGET")
    mod_name, attr = spec.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise click.BadParameter(f"cannot import {mod_name!r}: {e}", param_hint="TARGET") from e
    obj: Any = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(f"{mod_name!r} has no attribute {attr!r}", param_hint="TARGET") from None
    return obj


@click.command("serve")
@click.argument("target")
@click.option("--host", default=lambda: os.environ.get("OPENENV_HOST", "127.0.0.1"), show_default="127.0.0.1",
              help="Interface to listen on (0.0.0.0 in containers).")
@click.option("--port", type=int, default=lambda: int(os.environ.get("OPENENV_GRPC_PORT", "50051")),
              show_default="50051", help="gRPC port (0 picks a free one).")
@click.option("--max-sessions", type=int, default=None, help="Capacity (default: the environment's).")
@click.option("--idle-timeout", type=float, default=300.0, show_default=True,
              help="Close sessions idle for this many seconds (0 disables).")
@click.option("--max-message-mb", type=float, default=16.0, show_default=True, help="Largest message.")
@click.option("--grace", type=float, default=10.0, show_default=True, help="Drain time on SIGTERM.")
@click.option("--tools-only", is_flag=True, help="Production mode: only tools are reachable.")
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None,
              help="Write the bound address here once serving (for supervisors and tests).")
@click.option("--http-port", type=int, default=None, show_default="$PORT, else 8000 (a free port with --port 0)",
              help="Port of the HTTP side: OpenEnv's /ws, /mcp, /health (the Hugging Face Space path).")
@click.option("--http-host", default=None, show_default="--host", help="Interface of the HTTP side.")
@click.option("--no-http", is_flag=True, help="Serve gRPC only.")
@click.option("--http-ready-file", type=click.Path(dir_okay=False), default=None,
              help="Write the HTTP side's URL here once serving.")
@click.option("--ws-ping-interval", type=float, default=20.0, show_default=True,
              help="WebSocket keepalive ping interval in seconds (0 disables).")
@click.option("--ws-ping-timeout", type=float, default=20.0, show_default=True,
              help="Drop a WebSocket whose pong takes longer (frees half-open sessions).")
def serve_command(target: str, host: str, port: int, max_sessions: int | None, idle_timeout: float,
                  max_message_mb: float, grace: float, tools_only: bool, ready_file: str | None,
                  http_port: int | None, http_host: str | None, no_http: bool, http_ready_file: str | None,
                  ws_ping_interval: float, ws_ping_timeout: float) -> None:
    """Serve TARGET (module:Class) over gRPC and HTTP/WebSocket until SIGTERM, then drain."""
    from openenv.server import default_http_port, serve

    factory = load_factory(target)

    def ready(server: Any) -> None:
        click.echo(f"serving {server.runtime.env_cls.__name__} on {server.address}", err=True)
        if ready_file:
            write_ready_file(ready_file, server.address)
        if server.http_url:
            click.echo(f"serving {server.runtime.env_cls.__name__} on {server.http_url} (HTTP, WebSocket /ws)",
                       err=True)
            if http_ready_file:
                write_ready_file(http_ready_file, server.http_url)

    http: dict[str, Any] = {"http_port": None}
    if not no_http:
        from openenv.bridge import HttpOptions

        http = {"http_port": default_http_port(port) if http_port is None else http_port, "http_host": http_host,
                "http_options": HttpOptions(ws_ping_interval=ws_ping_interval, ws_ping_timeout=ws_ping_timeout,
                                            max_message_bytes=int(max_message_mb * 1024 * 1024))}
    try:
        serve(factory, host, port, max_sessions=max_sessions, idle_timeout_s=idle_timeout,
              max_message_bytes=int(max_message_mb * 1024 * 1024), grace_s=grace, tools_only=tools_only,
              ready=ready, **http)
    except (TypeError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e


@click.command("info")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the EnvironmentInfo as JSON.")
def info_command(url: str, as_json: bool) -> None:
    """Describe the environment served at URL (grpc://host:port)."""
    import asyncio

    import grpc
    from google.protobuf import json_format

    from openenv.client import parse_url
    from openenv.v1 import environment_pb2, environment_pb2_grpc

    async def fetch() -> Any:
        _, target = parse_url(url)
        async with grpc.aio.insecure_channel(target) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            return (await stub.GetInfo(environment_pb2.GetInfoRequest(), timeout=10)).info

    try:
        info = asyncio.run(fetch())
    except grpc.aio.AioRpcError as e:
        raise click.ClickException(f"{url}: {e.code().name}: {e.details()}") from e
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for f in info.descriptors.file:  # decode example payloads of any advertised type
        try:
            pool.Add(f)
        except TypeError:
            pass
    data = json_format.MessageToDict(info, preserving_proto_field_name=True, descriptor_pool=pool)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    cap = data.get("capabilities", {})
    click.echo(f"{info.name} {info.version} (protocol {info.protocol_version})")
    if info.description:
        click.echo(f"  {info.description}")
    for part in ("action", "observation", "state"):
        spec = data.get(part, {})
        kind = spec.get("kind", "PAYLOAD_KIND_UNSPECIFIED").removeprefix("PAYLOAD_KIND_").lower()
        click.echo(f"  {part:<12} {kind} {spec.get('message_type', '')}")
    click.echo("  capabilities " + ", ".join(f"{k}={v}" for k, v in cap.items()))


if __name__ == "__main__":
    main()
