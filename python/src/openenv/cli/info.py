"""``openenv info URL``: what an environment server advertises (``GetInfo``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
import grpc
from google.protobuf import descriptor_pool, json_format

from openenv.client.urls import parse_url
from openenv.v1 import environment_pb2, environment_pb2_grpc

__all__ = ["info_command"]


@click.command("info")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the EnvironmentInfo as JSON.")
def info_command(url: str, as_json: bool) -> None:
    """Describe the environment served at URL (grpc://host:port)."""

    async def fetch() -> Any:
        _, target = parse_url(url)
        async with grpc.aio.insecure_channel(target) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            return (await stub.GetInfo(environment_pb2.GetInfoRequest(), timeout=10)).info

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
