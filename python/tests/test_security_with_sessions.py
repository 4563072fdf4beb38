"""RFC 0003's guards together with what came beside them: resumed sessions (RFC 0006) over
TLS with a token, GetLoad (RFC 0005) and fleets of servers that require tokens, and the
metrics interceptor in front of the guard. Real loopback sockets; the connection drop goes
through a TCP proxy the test resets."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from openenv_testenvs import Counter
from openenv_testkit import WAIT_S, error_of, ok, running, target
from security_kit import make_pki
from tcp_proxy import TcpProxy

import openenv
from openenv.client.grpc import open_channel
from openenv.client.health import check_health
from openenv.client.load import fetch_load, get_load
from openenv.errors import ErrorCode
from openenv.fleet import FleetClient
from openenv.fleet.provider import Endpoint
from openenv.security import TlsConfig, TokenSet
from openenv.v1 import environment_pb2

pytestmark = pytest.mark.anyio

TOKEN = "merged-token-for-tests"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def test_a_session_on_a_tls_server_with_a_token_is_resumed_after_its_connection_drops(pki: Any) -> None:
    tls = TlsConfig(str(pki.server_cert), str(pki.server_key))
    async with running(Counter, tokens=TokenSet([TOKEN]), tls=tls) as srv, TcpProxy(srv.port or 0) as proxy:
        url = f"grpcs://localhost:{proxy.port}"
        async with openenv.EnvClient(url, token=TOKEN, ca_file=str(pki.ca)) as env:
            conn = env.connection
            assert isinstance(conn, openenv.client.GrpcConnection) and conn.resume_token
            await env.reset(seed=1)
            assert (await env.step({"delta": 2})).observation["total"] == 3
            assert proxy.drop() >= 1
            # The resume opens a new TLS channel and presents the token again.
            result = await asyncio.wait_for(env.step({"delta": 4}), WAIT_S * 2)
            assert result.observation["total"] == 7 and result.step_count == 2
            assert conn.resumes >= 1
        assert srv.manager.opened_total == 1  # resumed, not reopened


async def test_get_load_needs_the_token_and_health_does_not() -> None:
    async with running(Counter, tokens=TokenSet([TOKEN])) as srv:
        async with open_channel(target(srv)) as ch:
            with pytest.raises(openenv.Unauthenticated):
                await get_load(ch, WAIT_S)
            load = await get_load(ch, WAIT_S, token=TOKEN)
            assert load.max_sessions == srv.runtime.max_sessions
        # The blocking forms (openenv fleet status) run beside the server's event loop.
        assert (await asyncio.to_thread(fetch_load, target(srv), WAIT_S, token=TOKEN)).sessions_open == 0
        with pytest.raises(openenv.Unauthenticated):
            await asyncio.to_thread(fetch_load, target(srv), WAIT_S)
        assert await asyncio.to_thread(check_health, target(srv), "", WAIT_S) == "SERVING"


async def test_a_fleet_of_servers_that_require_tokens_places_sessions_with_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENENV_TOKEN", raising=False)
    async with running(Counter, tokens=TokenSet([TOKEN])) as a, running(Counter, tokens=TokenSet(["other"])) as b:
        # An endpoint's own token (a docker provider's container) wins over the fleet's.
        servers = [f"grpc://{target(a)}", Endpoint("b", f"grpc://{target(b)}", token="other")]
        async with FleetClient(servers, token=TOKEN) as fleet:
            sessions = [await fleet.open() for _ in range(4)]
            assert {fleet.server_of(s) for s in sessions} == {f"grpc://{target(a)}", f"grpc://{target(b)}"}
            for s in sessions:
                assert (await s.reset(seed=2)).observation["total"] == 2
            assert all(load is not None for load in fleet.loads().values())
            for s in sessions:
                await s.close()
        async with FleetClient([f"grpc://{target(a)}"]) as anonymous:  # no token: nowhere to go
            with pytest.raises(openenv.Unavailable) as e:
                await anonymous.open()
            assert "UNAUTHENTICATED" in e.value.message or "token" in e.value.message


async def test_the_metrics_interceptor_sees_undecodable_and_refused_calls_without_failing() -> None:
    host = openenv.Host(Counter, "127.0.0.1", 0, tokens=TokenSet([TOKEN]))
    async with host:
        assert host.address is not None
        hostport = host.address.removeprefix("grpc://")
        async with grpc.aio.insecure_channel(hostport) as ch:
            refused = ch.stream_stream(
                "/openenv.v1.EnvironmentService/Session",
                request_serializer=lambda b: b,
                response_deserializer=environment_pb2.SessionResponse.FromString,
            )()
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await asyncio.wait_for(refused.read(), WAIT_S)
            assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
            call = ch.stream_stream(
                "/openenv.v1.EnvironmentService/Session",
                request_serializer=lambda b: b,
                response_deserializer=environment_pb2.SessionResponse.FromString,
            )(metadata=(("authorization", f"Bearer {TOKEN}"),))
            hs = environment_pb2.SessionRequest(
                request_id=1, handshake=environment_pb2.HandshakeRequest(protocol_version=openenv.PROTOCOL_VERSION)
            )
            await call.write(hs.SerializeToString())
            ok(await asyncio.wait_for(call.read(), WAIT_S), "handshake")
            await call.write(b"\xff\xff\xff\xff\x0f\x08")  # not a SessionRequest
            st = error_of(await asyncio.wait_for(call.read(), WAIT_S))
            assert st.code == ErrorCode.INVALID_ARGUMENT and not st.fatal
            reset = environment_pb2.SessionRequest(request_id=2, reset=environment_pb2.ResetRequest(seed=5))
            await call.write(reset.SerializeToString())
            assert (await asyncio.wait_for(call.read(), WAIT_S)).WhichOneof("kind") == "reset"
            await call.done_writing()
            assert await asyncio.wait_for(call.code(), WAIT_S) is grpc.StatusCode.OK
        metrics = host.observer.metrics
        if metrics is not None:
            text = metrics.render().decode()
            assert "undecodable" in text  # the request was counted under its own kind
