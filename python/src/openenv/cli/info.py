"""``openenv info URL``: what an environment server advertises (``GetInfo``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
import grpc
from google.protobuf import descriptor_pool, json_format

from openenv.client.env import default_token
from openenv.client.grpc import open_channel, token_metadata
from openenv.client.urls import parse_url
from openenv.v1 import environment_pb2, environment_pb2_grpc, multiagent_pb2

__all__ = ["info_command"]


@click.command("info")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the EnvironmentInfo as JSON.")
@click.option("--token", default=None, help="Bearer token for a server that requires one (default: $OPENENV_TOKEN).")
@click.option("--ca-file", type=click.Path(dir_okay=False), default=None, help="CA of a grpcs:// server.")
def info_command(url: str, as_json: bool, token: str | None, ca_file: str | None) -> None:
    """Describe the environment served at URL (grpc(s)://host:port)."""

    async def fetch() -> Any:
        scheme, target = parse_url(url)
        async with open_channel(target, secure=scheme == "grpcs", ca_file=ca_file) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            request = environment_pb2.GetInfoRequest()
            metadata = token_metadata(token if token is not None else default_token(url))
            return (await stub.GetInfo(request, timeout=10, metadata=metadata)).info

    try:
        info = asyncio.run(fetch())
    except grpc.aio.AioRpcError as e:
        raise click.ClickException(f"{url}: {e.code().name}: {e.details()}") from e
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
    if info.HasField("multi_agent"):  # RFC 0012
        ma = info.multi_agent
        mode = "simultaneous" if ma.mode == multiagent_pb2.TURN_MODE_SIMULTANEOUS else "turn-based"
        agents = ", ".join(f"{a.id} ({a.role})" if a.role and a.role != a.id else a.id for a in ma.agents)
        extra = f", reward_sum={ma.reward_sum:g}" if ma.HasField("reward_sum") else ""
        click.echo(f"  agents       {mode}: {agents}{extra}" + (", joinable" if ma.joinable else ""))
