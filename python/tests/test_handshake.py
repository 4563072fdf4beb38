"""The handshake (docs/protocol.md §3.3), spoken raw with the generated stub."""

from __future__ import annotations

import grpc
import pytest
from openenv_testenvs import Counter, FactoryFails
from openenv_testkit import RawSession, error_of, get_info, ok, running, target

import openenv
from openenv.errors import ErrorCode
from openenv.v1 import environment_pb2

pytestmark = pytest.mark.anyio


async def test_handshake_returns_session_and_info_equal_to_get_info() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            hs = await s.open(client_name="tests/handshake")
            assert hs.protocol_version == "1.6" == openenv.PROTOCOL_VERSION
            assert len(hs.session_id) == 32 and int(hs.session_id, 16) >= 0
            info = await get_info(target(srv))
            assert hs.info == info
            assert info.protocol_version == "1.6"
            assert info.name == "counter"
            assert info.action.kind == 2  # PAYLOAD_KIND_JSON: a dataclass action
            assert srv.manager.active == 1
            # the session starts with no episode
            st = ok(await s.request(state=environment_pb2.StateRequest()), "state")
            assert st.episode_id == "" and st.step_count == 0
            assert st.status == environment_pb2.EPISODE_STATUS_NOT_STARTED
        async with RawSession(target(srv)) as s2:
            assert (await s2.open()).session_id != hs.session_id


async def test_client_handshake_exposes_info() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            assert env.session_id
            assert env.info == await get_info(target(srv))


@pytest.mark.parametrize("version", ["2.0", "0.9", "10.1", "one.zero", "1", "1.x", "v1.0", "1.0.0"])
async def test_unsupported_or_unparsable_version_is_fatal_failed_precondition(version: str) -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            err = error_of(await s.handshake(version))
            assert err.code == ErrorCode.FAILED_PRECONDITION
            assert err.fatal
            assert "1.6" in err.message  # says what the server speaks
            ended = await s.ended()
            assert ended.code == grpc.StatusCode.OK  # the error travelled in band
        assert srv.manager.active == 0 and Counter.created == 0


@pytest.mark.parametrize("version", ["1.0", "1.7", "1.123"])
async def test_any_1x_minor_is_accepted(version: str) -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            hs = ok(await s.handshake(version), "handshake")
            assert hs.protocol_version == "1.6"  # the server states its own version
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")


async def test_empty_version_is_fatal_invalid_argument() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            err = error_of(await s.handshake(""))
            assert err.code == ErrorCode.INVALID_ARGUMENT and err.fatal
            assert (await s.ended()).code == grpc.StatusCode.OK


@pytest.mark.parametrize(
    "first",
    [
        {"reset": environment_pb2.ResetRequest()},
        {"step": environment_pb2.StepRequest()},
        {"state": environment_pb2.StateRequest()},
        {"close": environment_pb2.CloseRequest()},
        {},  # no kind at all
    ],
)
async def test_first_request_not_a_handshake_is_fatal_failed_precondition(first: dict) -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            resp = await s.request(**first)
            err = error_of(resp)
            assert err.code == ErrorCode.FAILED_PRECONDITION and err.fatal
            assert "handshake" in err.message
            assert (await s.ended()).code == grpc.StatusCode.OK
        assert Counter.created == 0


async def test_second_handshake_is_not_fatal_and_changes_nothing() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            hs = await s.open()
            ok(await s.request(reset=environment_pb2.ResetRequest(seed=5, episode_id="ep")), "reset")
            err = error_of(await s.handshake())
            assert err.code == ErrorCode.FAILED_PRECONDITION and not err.fatal
            st = ok(await s.request(state=environment_pb2.StateRequest()), "state")
            assert st.episode_id == "ep" and st.status == environment_pb2.EPISODE_STATUS_RUNNING
            assert srv.manager.active == 1 and Counter.created == 1
            assert list(srv.manager.sessions) == [hs.session_id]


async def test_handshake_options_reach_the_factory() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address, options={"tag": "alpha"}) as env:
            r = await env.reset()
            assert r.observation == {"total": 0, "tag": "alpha"}


async def test_factory_failure_is_fatal_internal() -> None:
    async with running(FactoryFails) as srv:
        async with RawSession(target(srv)) as s:
            hs = environment_pb2.HandshakeRequest(protocol_version="1.0")
            hs.options.update({"fail": True})
            err = error_of(await s.request(handshake=hs))
            assert err.code == ErrorCode.INTERNAL and err.fatal
            assert "OSError: no GPU left" in err.message
            assert (await s.ended()).code == grpc.StatusCode.OK
        assert srv.manager.active == 0
        with pytest.raises(openenv.Internal):
            await openenv.EnvClient(srv.address, options={"fail": True}).connect()
        async with openenv.EnvClient(srv.address) as env:  # the server is fine
            await env.reset()
