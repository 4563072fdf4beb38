"""A server advertises exactly what it enforces, whichever of its listeners run (issue 55).

The capabilities a client is told (``GetInfo``, ``/openenv/info``, the handshake's
``EnvironmentInfo``) are written by the protocol engine from the server's settings, not by
one listener's constructor: a :class:`openenv.Host` with only the HTTP side, or only the binary
WebSocket listener, must say that a token is required when one is, offer pipelined messages
when its limits do, and announce its handshake deadline, exactly as the gRPC listener does.
Every test talks to a real ``openenv.Host`` over 127.0.0.1 (port 0) through each of its
listeners: gRPC (grpc.aio), the binary WebSocket (picows) and OpenEnv's JSON ``/ws``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from openenv_testenvs import Counter
from websockets.asyncio.client import connect

import openenv
from openenv.runtime.limits import Limits
from openenv.security import SecuritySettings
from openenv.settings import ServerSettings
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import environment_pb2_grpc
from openenv.values import from_value, to_value

pytestmark = pytest.mark.anyio

WAIT = 30.0
TOKEN = "capabilities-token"
HANDSHAKE_S = 7.0
PIPELINED = 32

LISTENERS = {  # Host's port arguments: each listener alone, and all three over one engine
    "grpc": {"port": 0},
    "http": {"port": None, "http_port": 0},
    "binary": {"port": None, "binary_port": 0},
    "all": {"port": 0, "http_port": 0, "binary_port": 0},
}


def settings(token: str | None) -> ServerSettings:
    return ServerSettings(
        limits=Limits(handshake_timeout_s=HANDSHAKE_S, max_pipelined_requests=PIPELINED),
        security=SecuritySettings(tokens=[token] if token else []),
    )


@contextlib.asynccontextmanager
async def hosted(listeners: str, token: str | None) -> AsyncIterator[openenv.Host]:
    ports: dict[str, Any] = dict(LISTENERS[listeners])
    host = openenv.Host(Counter, "127.0.0.1", ports.pop("port"), settings=settings(token), **ports)
    await asyncio.wait_for(host.start(), WAIT)
    try:
        yield host
    finally:
        await asyncio.wait_for(host.stop(1.0), WAIT)


def urls(host: openenv.Host) -> dict[str, str]:
    """The URL of each running listener, by the transport a client then speaks."""
    out = {}
    if host.address:
        out["grpc"] = host.address
    if host.binary_url:
        out["binary"] = host.binary_url
    if host.http_url:
        out["json /ws"] = host.http_url
    return out


def expected(token: str | None) -> pb.Capabilities:
    """What the settings make every listener enforce (the other capabilities are the runtime's)."""
    caps = pb.Capabilities(auth_required=bool(token), pipelined_requests=True, max_pipelined_requests=PIPELINED)
    caps.handshake_timeout.FromNanoseconds(int(HANDSHAKE_S * 1e9))
    return caps


def enforced(caps: pb.Capabilities) -> pb.Capabilities:
    return pb.Capabilities(
        auth_required=caps.auth_required,
        pipelined_requests=caps.pipelined_requests,
        max_pipelined_requests=caps.max_pipelined_requests,
        handshake_timeout=caps.handshake_timeout if caps.HasField("handshake_timeout") else None,
    )


async def described(host: openenv.Host, token: str | None) -> dict[str, pb.Capabilities]:
    """Every description of the server its listeners give: GetInfo (gRPC), ``/openenv/info``
    (the HTTP and binary listeners) and the handshake's ``EnvironmentInfo`` on every transport."""
    out: dict[str, pb.Capabilities] = {}
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    if host.address:
        async with grpc.aio.insecure_channel(host.address.removeprefix("grpc://")) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            info = await stub.GetInfo(pb.GetInfoRequest(), metadata=metadata, timeout=WAIT)
            out["grpc GetInfo"] = info.info.capabilities
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for name, port in (("http", host.http.port if host.http else None), ("binary", host.binary_port)):
        if port is None:
            continue
        port = host.binary.port if name == "binary" else port
        async with httpx.AsyncClient(timeout=WAIT, trust_env=False) as http:
            doc = (await http.get(f"http://127.0.0.1:{port}/openenv/info", headers=headers)).json()
        out[f"{name} /openenv/info"] = json_format.ParseDict(doc, pb.EnvironmentInfo()).capabilities
    for transport, url in urls(host).items():
        async with openenv.EnvClient(url, token=token) as env:
            assert env.info is not None
            out[f"{transport} handshake"] = env.info.capabilities
    return out


@pytest.mark.parametrize("token", [None, TOKEN], ids=["anonymous", "token"])
@pytest.mark.parametrize("listeners", list(LISTENERS))
async def test_every_listener_advertises_the_capabilities_its_settings_enforce(
    listeners: str, token: str | None
) -> None:
    """A Host with only an HTTP or binary listener advertised ``auth_required=false`` although
    it required a token, and no pipelined messages although its limits offered them: the
    capabilities were written by the gRPC listener's constructor only. Every description, on
    every transport, must now be the settings' and the same."""
    async with hosted(listeners, token) as host:
        seen = await described(host, token)
        assert len(seen) >= 2
        for where, caps in seen.items():
            assert enforced(caps) == expected(token), f"{where} advertises {caps}"
        first = next(iter(seen.values()))
        assert all(caps == first for caps in seen.values()), seen  # identical, every field


@pytest.mark.parametrize("listeners", ["http", "binary"])
async def test_a_token_advertised_is_a_token_required(listeners: str) -> None:
    """``auth_required`` is true exactly when a client without the token is refused, on a Host
    with no gRPC listener too."""
    async with hosted(listeners, TOKEN) as host:
        for url in urls(host).values():
            with pytest.raises(openenv.Unauthenticated):
                async with openenv.EnvClient(url, connect_timeout=WAIT):
                    pass
    async with hosted(listeners, None) as host:
        for url in urls(host).values():
            async with openenv.EnvClient(url) as env:
                assert (await env.reset(seed=1)).observation["total"] == 1


async def test_a_pipelined_message_is_answered_by_a_host_without_grpc() -> None:
    """The binary WebSocket carries pipelined messages (RFC 0009): a Host serving it alone
    answered them as refused, since only the gRPC listener offered them."""
    async with hosted("binary", TOKEN) as host:
        assert host.binary_url is not None
        ws = await connect(
            host.binary_url,
            subprotocols=["openenv.v1+proto"],  # type: ignore[list-item]
            additional_headers={"Authorization": f"Bearer {TOKEN}"},
            proxy=None,
        )
        try:

            async def ask(req: pb.SessionRequest) -> pb.SessionResponse:
                await ws.send(req.SerializeToString())
                data = await asyncio.wait_for(ws.recv(), WAIT)
                assert isinstance(data, bytes)
                return pb.SessionResponse.FromString(data)

            hello = await ask(pb.SessionRequest(request_id=1, handshake=pb.HandshakeRequest(protocol_version="1.0")))
            assert hello.WhichOneof("kind") == "handshake", hello
            assert hello.handshake.info.capabilities.pipelined_requests
            assert (await ask(pb.SessionRequest(request_id=2, reset=pb.ResetRequest(seed=10)))).HasField("reset")
            msg = pb.SessionRequest(request_id=3)
            for rid, delta in ((4, 1), (5, 2), (6, 3)):
                item = msg.pipelined.requests.add(request_id=rid)
                item.step.action.json.CopyFrom(to_value({"delta": delta}))
            resp = await ask(msg)
            assert resp.WhichOneof("kind") == "pipelined", resp
            answers = resp.pipelined.responses
            assert [a.request_id for a in answers] == [4, 5, 6]
            totals = [from_value(a.step.time_step.observation.json)["total"] for a in answers]
            assert totals == [11, 13, 16]
        finally:
            await ws.close()


async def test_every_listener_refuses_a_missing_or_wrong_token_in_the_same_words() -> None:
    """One Authenticator serves every listener: the refusal of a call without a token, or with
    one that is not accepted, says the same on gRPC, the binary WebSocket and JSON ``/ws``
    (it was written once per listener)."""
    from openenv.security.auth import NOT_ACCEPTED, REQUIRED

    async with hosted("all", TOKEN) as host:
        assert host.engine.authenticator.tokens == host.settings.security.tokens
        assert host.binary is not None and host.binary.auth is host.engine.authenticator
        for transport, url in urls(host).items():
            with pytest.raises(openenv.Unauthenticated, match=REQUIRED):
                async with openenv.EnvClient(url, token="", connect_timeout=WAIT):
                    pass
            with pytest.raises(openenv.Unauthenticated, match=NOT_ACCEPTED):
                async with openenv.EnvClient(url, token="wrong", connect_timeout=WAIT):
                    pass
            async with openenv.EnvClient(url, token=TOKEN) as env:
                assert (await env.reset(seed=2)).observation["total"] == 2, transport
