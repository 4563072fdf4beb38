"""The grpclib engine (openenv.grpc_libraries) over real loopback sockets: its listener serves
grpcio clients and its client speaks to the grpc.aio listener, both ways and with each
other; tokens, TLS, the message limit, undecodable requests, health, reflection and GetInfo
behave as on the reference engine. (Speed is the bench's business: docs/performance.md.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from openenv_testenvs import AsyncCounter, Counter
from openenv_testkit import WAIT_S, RawSession, error_of, ok, wait_until
from security_kit import make_pki

import openenv
from openenv.client.env import connect_url
from openenv.errors import ErrorCode
from openenv.grpc_libraries import server_class
from openenv.security import TlsConfig, TokenSet
from openenv.v1 import environment_pb2, environment_pb2_grpc, load_pb2

pytest.importorskip("grpclib")

pytestmark = pytest.mark.anyio

TOKEN = "engine-test-token"
SERVICE = "openenv.v1.EnvironmentService"


@contextlib.asynccontextmanager
async def serving(engine: str, factory: Any = Counter, **kwargs: Any) -> AsyncIterator[openenv.Server]:
    srv = server_class(engine)(factory, "127.0.0.1", 0, **kwargs)
    await asyncio.wait_for(srv.start(), WAIT_S)
    try:
        yield srv
    finally:
        await asyncio.wait_for(srv.stop(1.0), WAIT_S + 5)


@pytest.mark.parametrize(
    ("server_engine", "client_engine"),
    [("grpclib", "grpclib"), ("grpclib", "grpcio"), ("grpcio", "grpclib")],
)
@pytest.mark.parametrize("env_cls", [Counter, AsyncCounter])
async def test_a_session_works_across_engines_in_order_with_pipelining(
    server_engine: str, client_engine: str, env_cls: Any
) -> None:
    env_cls.reset_counts()
    async with serving(server_engine, env_cls) as srv:
        async with openenv.EnvClient(srv.address, grpc_engine=client_engine, options={"tag": "t"}) as env:
            assert env.info is not None and env.info.name
            assert (await env.reset(seed=10)).observation == {"total": 10, "tag": "t"}
            r = await env.step({"delta": 5})
            assert r.observation["total"] == 15 and r.reward == 5.0 and r.step_count == 1
            # 20 pipelined steps: answered in call order, each matched to its request
            results = await asyncio.gather(*(env.step({"delta": 1}) for _ in range(20)))
            assert [x.observation["total"] for x in results] == list(range(16, 36))
            with pytest.raises(openenv.InvalidArgument):  # an error answer is raised in band...
                await env.step({"delta": 5000})
            assert (await env.state()).state["total"] == 35  # ...and the session goes on
        await wait_until(lambda: srv.manager.active == 0 and env_cls.closed == 1, what="the session released")


async def test_the_grpclib_listener_answers_health_reflection_and_getinfo_to_grpcio() -> None:
    async with serving("grpclib") as srv, grpc.aio.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", SERVICE):
            resp = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT_S)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=WAIT_S)
        assert e.value.code() is grpc.StatusCode.NOT_FOUND
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE))
        assert (await asyncio.wait_for(watch.read(), WAIT_S)).status == health_pb2.HealthCheckResponse.SERVING
        await srv.set_serving(False)  # a drain starts: watchers hear it
        assert (await asyncio.wait_for(watch.read(), WAIT_S)).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()
        await srv.set_serving(True)

        info = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
            environment_pb2.GetInfoRequest(), timeout=WAIT_S
        )
        assert info.info == srv.runtime.info
        load = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetLoad(load_pb2.GetLoadRequest(), timeout=WAIT_S)
        assert load.load.max_sessions == srv.runtime.max_sessions

        call = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo()
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        names = [s.name for s in (await asyncio.wait_for(call.read(), WAIT_S)).list_services_response.service]
        assert SERVICE in names
        await call.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE))
        files = (await asyncio.wait_for(call.read(), WAIT_S)).file_descriptor_response.file_descriptor_proto
        assert files
        await call.done_writing()


async def test_the_grpclib_listener_requires_its_token_on_every_call_but_health() -> None:
    async with serving("grpclib", tokens=TokenSet([TOKEN])) as srv:
        for engine in ("grpcio", "grpclib"):
            for token in ("", "wrong"):
                with pytest.raises(openenv.Unauthenticated) as e:
                    async with openenv.EnvClient(srv.address, token=token, grpc_engine=engine, connect_timeout=WAIT_S):
                        pass
                assert e.value.code == ErrorCode.UNAUTHENTICATED
            async with openenv.EnvClient(srv.address, token=TOKEN, grpc_engine=engine) as env:
                assert (await env.reset(seed=3)).observation["total"] == 3
        assert srv.manager.opened_total == 2  # the refused handshakes never opened a session
        async with grpc.aio.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as rpc:
                await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
                    environment_pb2.GetInfoRequest(), timeout=WAIT_S
                )
            assert rpc.value.code() is grpc.StatusCode.UNAUTHENTICATED
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=WAIT_S)
            assert health.status == health_pb2.HealthCheckResponse.SERVING


async def test_the_grpclib_listener_answers_undecodable_bytes_in_band_and_refuses_oversized_messages() -> None:
    async with serving("grpclib", max_message_bytes=64 * 1024) as srv:
        async with RawSession(f"127.0.0.1:{srv.port}") as s:
            await s.open()
            raw = s.channel.stream_stream(
                "/openenv.v1.EnvironmentService/Session",
                request_serializer=lambda b: b,
                response_deserializer=environment_pb2.SessionResponse.FromString,
            )()
            await raw.write(b"\xff\xff\xff\xff\x0f\x08")  # not a SessionRequest: a fatal in-band answer
            st = error_of(await asyncio.wait_for(raw.read(), WAIT_S))
            assert st.code == ErrorCode.INVALID_ARGUMENT and st.fatal
            assert await asyncio.wait_for(raw.code(), WAIT_S) is grpc.StatusCode.OK
            big = environment_pb2.SessionRequest(request_id=5)
            big.step.action.json.string_value = "x" * (128 * 1024)
            await s.call.write(big)  # over the limit: the stream ends RESOURCE_EXHAUSTED
            ended = await s.ended()
            assert ended.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        await wait_until(lambda: srv.manager.active == 0, what="the session released")
        async with RawSession(f"127.0.0.1:{srv.port}") as s:  # the listener still serves
            await s.open()
            ok(await s.request(reset=environment_pb2.ResetRequest(seed=1)), "reset")


async def test_the_grpclib_client_reports_a_refused_connection_and_a_server_ended_stream() -> None:
    with pytest.raises(openenv.Unavailable):
        async with openenv.EnvClient("grpc://127.0.0.1:9", grpc_engine="grpclib", connect_timeout=2.0):
            pass
    async with serving("grpcio") as srv:
        async with openenv.EnvClient(srv.address, grpc_engine="grpclib", resume=False) as env:
            await env.reset()
            await srv.stop(1.0)  # the server drains: it ends the session's stream
            with pytest.raises(openenv.EnvError) as e:
                for _ in range(100):  # answers may still be in flight until the stream ends
                    await asyncio.wait_for(env.step({"delta": 1}), WAIT_S)
            assert e.value.fatal


@pytest.mark.parametrize("half_close_late", [False, True])
@pytest.mark.parametrize("server_engine", ["grpcio", "grpclib"])
async def test_a_stream_the_server_ended_while_the_grpclib_client_still_sends_is_a_normal_end(
    server_engine: str, half_close_late: bool
) -> None:
    """A server answers a close request and ends the stream with OK trailers while the client
    has not half-closed yet, and may then reset it with RST_STREAM(NO_ERROR) to say "stop
    sending" (RFC 9113 section 8.1; grpc.aio does). When all of that is read at once, the
    grpclib client once took it for a broken stream ("Outgoing stream was not ended", or the
    reset), so about a third of session closes ended abnormally and dialled again to release a
    parked session. The client here reads only after the server's end has arrived, the order
    that made it fail every time: the answers, then the normal end (None), no error; also when
    it half-closes too late (as a session's graceful shutdown may), on a stream already over."""
    from openenv.client.grpclib import GrpclibDialer
    from openenv.client.options import ConnectionOptions

    async with serving(server_engine) as srv:
        for _ in range(3):
            hs = environment_pb2.HandshakeRequest(protocol_version=openenv.PROTOCOL_VERSION)
            dialer = GrpclibDialer(f"127.0.0.1:{srv.port}", ConnectionOptions(), srv.address)
            channel = await dialer.dial(hs, WAIT_S, first=True)
            try:
                await channel.send(environment_pb2.SessionRequest(request_id=1, handshake=hs))
                assert (await asyncio.wait_for(channel.receive(), WAIT_S)).WhichOneof("kind") == "handshake"
                await channel.send(environment_pb2.SessionRequest(request_id=2, close=environment_pb2.CloseRequest()))
                # Everything the server sends is in before the client reads on: the trailers,
                # and from grpc.aio the reset that follows them (the stream then closes here).
                h2 = channel._stream._stream
                await wait_until(
                    lambda h2=h2: h2.trailers is not None and (server_engine == "grpclib" or not h2.closable),
                    what="the server's end of the stream",
                )
                if half_close_late:
                    await asyncio.wait_for(channel.end(), WAIT_S)
                closed = await asyncio.wait_for(channel.receive(), WAIT_S)
                assert closed is not None and closed.request_id == 2 and closed.WhichOneof("kind") == "close"
                assert await asyncio.wait_for(channel.receive(), WAIT_S) is None
                assert channel._why is None
            finally:
                await channel.close()


async def test_every_grpclib_session_close_is_a_normal_end_without_a_second_dial() -> None:
    """The symptom of the test above at the session level: when a close's answer, the trailers
    and grpc.aio's RST_STREAM(NO_ERROR) arrived together, the session took the stream for a
    broken one and dialled the server again to release a parked session (most closes, with
    the server on a loop of its own). Each session dials once; the dials are counted on the
    client's own dialer (the real one, only counted)."""
    from openenv_testkit import server_thread

    with server_thread(Counter) as srv:
        for _ in range(20):
            env = openenv.EnvClient(srv.address, grpc_engine="grpclib")
            await env.connect()
            dialer = env.connection.dialer  # type: ignore[union-attr]
            dials: list[bool] = []
            real_dial = dialer.dial

            async def counted(*args: Any, _real: Any = real_dial, _dials: Any = dials, **kwargs: Any) -> Any:
                _dials.append(True)
                return await _real(*args, **kwargs)

            dialer.dial = counted
            await env.reset(seed=1)
            await env.step({"delta": 1})
            await env.close()
            assert not dials, "the session's close ended abnormally: it dialled again to release the session"


async def test_tls_works_with_the_grpclib_engine_on_both_sides(tmp_path: Any) -> None:
    pki = make_pki(tmp_path)
    tls = TlsConfig(str(pki.server_cert), str(pki.server_key))
    async with serving("grpclib", tls=tls) as srv:
        assert srv.address.startswith("grpcs://")
        url = f"grpcs://localhost:{srv.port}"
        for engine in ("grpclib", "grpcio"):
            async with openenv.EnvClient(url, ca_file=str(pki.ca), grpc_engine=engine) as env:
                assert (await env.reset(seed=2)).observation["total"] == 2
            with pytest.raises(openenv.Unavailable):  # a CA that signed nothing here
                async with openenv.EnvClient(url, ca_file=str(pki.other_ca), grpc_engine=engine, connect_timeout=2.0):
                    pass


def test_an_unknown_engine_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="grpclib"):
        server_class("quic")
    with pytest.raises(ValueError, match="grpclib"):
        connect_url("grpc://127.0.0.1:1", grpc_engine="quic")
