"""The error table (docs/protocol.md §5.2): every code triggered over a real stream and
asserted, with the stream still usable after every recoverable one."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from openenv_testenvs import (
    AsyncSlow,
    Counter,
    Failing,
    MessageEnv,
    SchemaEnv,
    Scripted,
    TensorEnv,
    ToolEnv,
)
from openenv_testkit import (
    WAIT_S,
    RawSession,
    error_of,
    get_info,
    ok,
    running,
    target,
    until_raises,
    wait_released,
    wait_until,
)

import openenv
from openenv.errors import ErrorCode
from openenv.runtime.codec import tensor_to_proto
from openenv.v1 import environment_pb2, payload_pb2, tool_pb2
from openenv.values import from_value, to_value

pytestmark = pytest.mark.anyio

RESET = {"reset": environment_pb2.ResetRequest()}
STATE = {"state": environment_pb2.StateRequest()}


def step_req(payload: payload_pb2.Payload, timeout_s: float | None = None) -> dict:
    st = environment_pb2.StepRequest(action=payload)
    if timeout_s is not None:
        st.timeout.FromNanoseconds(int(timeout_s * 1e9))
    return {"step": st}


def json_payload(value: object) -> payload_pb2.Payload:
    return payload_pb2.Payload(json=to_value(value))


async def assert_usable(s: RawSession, *, steps: int | None = None) -> environment_pb2.StateResponse:
    """The stream still answers (state never fails once open); checks step_count."""
    st = ok(await s.request(**STATE), "state")
    if steps is not None:
        assert st.step_count == steps
    return st


def assert_error(
    resp: environment_pb2.SessionResponse, code: ErrorCode, *, fatal: bool = False, contains: str = ""
) -> environment_pb2.SessionResponse:
    err = error_of(resp)
    assert err.code == code, f"expected {code.name}, got {err}"
    assert err.fatal is fatal
    assert err.message, "an error must explain itself"
    assert contains in err.message
    return err


# --------------------------------------------------------------------------- INVALID_ARGUMENT


async def test_invalid_argument_wrong_payload_kind() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(**RESET), "reset")
            tensor = payload_pb2.Payload(tensor=tensor_to_proto(np.arange(3, dtype=np.int32)))
            assert_error(await s.request(**step_req(tensor)), ErrorCode.INVALID_ARGUMENT, contains="JSON")
            assert_error(await s.request(**step_req(payload_pb2.Payload())), ErrorCode.INVALID_ARGUMENT)
            await assert_usable(s, steps=0)
            ts = ok(await s.request(**step_req(json_payload({"delta": 2}))), "step").time_step
            assert ts.step_count == 1 and from_value(ts.observation.json)["total"] == 2


async def test_invalid_argument_any_of_wrong_type_and_garbage_bytes() -> None:
    async with running(MessageEnv) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(**RESET), "reset")
            wrong = payload_pb2.Payload()
            wrong.message.Pack(tool_pb2.ImageContent(data=b"\x89PNG", mime_type="image/png"))
            assert_error(
                await s.request(**step_req(wrong)), ErrorCode.INVALID_ARGUMENT, contains="openenv.v1.TextContent"
            )
            garbage = payload_pb2.Payload()
            garbage.message.type_url = "type.googleapis.com/openenv.v1.TextContent"
            garbage.message.value = b"\xff\xff\xff\xff"
            assert_error(await s.request(**step_req(garbage)), ErrorCode.INVALID_ARGUMENT, contains="undecodable")
            assert_error(await s.request(**step_req(json_payload({"text": "hi"}))), ErrorCode.INVALID_ARGUMENT)
            await assert_usable(s, steps=0)
            good = payload_pb2.Payload()
            good.message.Pack(tool_pb2.TextContent(text="hi"))
            ts = ok(await s.request(**step_req(good)), "step").time_step
            out = tool_pb2.TextContent()
            assert ts.observation.message.Unpack(out) and out.text == "HI"


async def test_invalid_argument_schema_violation_dataclass() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            for bad in ({"delta": "many"}, {"nope": 1}, [1, 2], {"delta": 1, "finish": "sometimes"}):
                with pytest.raises(openenv.InvalidArgument) as exc:
                    await env.step(bad)
                assert exc.value.code == ErrorCode.INVALID_ARGUMENT and not exc.value.fatal
                assert exc.value.details, "validation errors travel in Status.details"
            r = await env.step({"delta": 3})
            assert r.observation["total"] == 3 and r.step_count == 1


async def test_invalid_argument_schema_violation_json_schema() -> None:
    async with running(SchemaEnv) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            for bad in ({"x": -1}, {"x": 1, "extra": True}, {"label": "no x"}, "x", {"x": 1.5}):
                with pytest.raises(openenv.InvalidArgument) as exc:
                    await env.step(bad)
                assert "schema" in exc.value.message
                assert isinstance(exc.value.details, list) and exc.value.details[0]["message"]
            assert (await env.step({"x": 21, "label": "ok"})).observation == {"x": 42}
            assert (await env.state()).step_count == 1


async def test_invalid_argument_bad_tensor() -> None:
    async with running(TensorEnv) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(**RESET), "reset")
            bad_tensors = [
                payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_FLOAT32, shape=[3], data=b"\x00" * 11),  # length
                payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_UNSPECIFIED, shape=[3], data=b"\x00" * 12),
                payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_FLOAT32, shape=[-3], data=b""),
                payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_FLOAT64, shape=[3], data=b"\x00" * 24),  # dtype
                payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_FLOAT32, shape=[4], data=b"\x00" * 16),  # shape
                tensor_to_proto(np.array([0, 0, 11], dtype=np.float32)),  # above maximum
            ]
            for t in bad_tensors:
                assert_error(await s.request(**step_req(payload_pb2.Payload(tensor=t))), ErrorCode.INVALID_ARGUMENT)
            await assert_usable(s, steps=0)
            good = payload_pb2.Payload(tensor=tensor_to_proto(np.array([1, 2, 3], dtype=np.float32)))
            ts = ok(await s.request(**step_req(good)), "step").time_step
            assert ts.observation.tensor.shape == [3]
            assert np.frombuffer(ts.observation.tensor.data, "<f4").tolist() == [2, 4, 6]
        async with openenv.EnvClient(srv.address) as env:  # the client decodes tensors as arrays
            await env.reset()
            r = await env.step(np.array([0.5, -1, 10], dtype=np.float32))
            assert r.observation.dtype == np.float32 and r.observation.tolist() == [1.0, -2.0, 20.0]


async def test_invalid_argument_raised_by_the_environment() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            await env.step({"delta": 1})
            with pytest.raises(openenv.InvalidArgument) as exc:  # InvalidAction travels as INVALID_ARGUMENT
                await env.step({"delta": 5000})
            assert exc.value.code == ErrorCode.INVALID_ARGUMENT and not exc.value.fatal
            assert "above 1000" in exc.value.message
            st = await env.state()  # the step was not counted
            assert st.step_count == 1 and st.state["total"] == 1
            assert (await env.step({"delta": 1})).step_count == 2


async def test_invalid_argument_unset_request_kind_when_open() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            assert_error(await s.request(environment_pb2.SessionRequest()), ErrorCode.INVALID_ARGUMENT)
            await assert_usable(s)


async def test_malformed_step_before_reset_is_invalid_argument_first() -> None:
    """§3.5 ordering: a malformed request (4) is reported before the episode status (5)."""
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            assert_error(await s.request(**step_req(json_payload({"delta": "x"}))), ErrorCode.INVALID_ARGUMENT)
            assert_error(await s.request(**step_req(json_payload({"delta": 1}))), ErrorCode.FAILED_PRECONDITION)


# --------------------------------------------------------------------------- FAILED_PRECONDITION


async def test_failed_precondition_step_before_reset() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            with pytest.raises(openenv.FailedPrecondition) as exc:
                await env.step({"delta": 1})
            assert not exc.value.fatal and "reset" in exc.value.message
            st = await env.state()
            assert st.status is openenv.EpisodeStatus.NOT_STARTED and st.episode_id == ""
            await env.reset()
            assert (await env.step({"delta": 1})).step_count == 1


@pytest.mark.parametrize(
    "finish,status", [("terminated", openenv.EpisodeStatus.TERMINATED), ("truncated", openenv.EpisodeStatus.TRUNCATED)]
)
async def test_failed_precondition_step_after_the_episode_ended(finish: str, status: openenv.EpisodeStatus) -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            first = await env.reset(episode_id="ep-1")
            assert first.episode_id == "ep-1" and first.reward is None
            r = await env.step({"delta": 4, "finish": finish})
            assert r.done and getattr(r, finish) and r.step_count == 1
            for _ in range(2):
                with pytest.raises(openenv.FailedPrecondition) as exc:
                    await env.step({"delta": 1})
                assert not exc.value.fatal and finish in exc.value.message
            st = await env.state()
            assert (st.status, st.step_count, st.episode_id) == (status, 1, "ep-1")
            again = await env.reset()
            assert len(again.episode_id) == 32 and again.episode_id != "ep-1"  # uuid4 hex
            assert (await env.step({"delta": 1})).step_count == 1


# --------------------------------------------------------------------------- RESOURCE_EXHAUSTED


async def test_resource_exhausted_capacity() -> None:
    async with running(Counter, max_sessions=2) as srv:
        assert (await get_info(target(srv))).capabilities.max_sessions == 2
        async with openenv.EnvClient(srv.address) as a, openenv.EnvClient(srv.address) as b:
            async with RawSession(target(srv)) as s:
                err = assert_error(await s.handshake(), ErrorCode.RESOURCE_EXHAUSTED, fatal=True)
                assert "2/2" in err.message
                assert (await s.ended()).code == grpc.StatusCode.OK
            with pytest.raises(openenv.ResourceExhausted) as exc:
                await openenv.EnvClient(srv.address).connect()
            assert exc.value.fatal and exc.value.details == {"active_sessions": 2, "max_sessions": 2}
            await a.reset()  # the open sessions are unaffected
            await b.reset()
            await b.close()
            await wait_until(lambda: srv.manager.active == 1, what="the closed slot to be freed")
            async with openenv.EnvClient(srv.address) as c:
                assert (await c.reset(seed=3)).observation["total"] == 3
        assert Counter.created == 3


async def test_resource_exhausted_message_too_large_ends_the_stream_only() -> None:
    limit = 64 * 1024
    async with running(Scripted, max_message_bytes=limit) as srv:
        assert (await get_info(target(srv))).capabilities.max_message_bytes == limit
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(**RESET), "reset")
            await s.send(**step_req(json_payload({"op": "echo", "value": "x" * (limit + 1)})))
            ended = await s.ended()
            assert ended.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        await wait_released(srv, Scripted)
        assert (await get_info(target(srv))).name == "scripted"  # the server is healthy
        async with openenv.EnvClient(srv.address) as env:  # and a new session works
            await env.reset()
            assert (await env.step({"op": "echo", "value": "small"})).observation == "small"


async def test_resource_exhausted_client_checks_size_locally() -> None:
    limit = 64 * 1024
    async with running(Scripted, max_message_bytes=limit) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.ResourceExhausted) as exc:
                await env.step({"op": "echo", "value": "x" * (limit + 1)})
            assert not exc.value.fatal and str(limit) in exc.value.message
            r = await env.step({"op": "echo", "value": "fits"})  # the session survived
            assert r.observation == "fits" and r.step_count == 1
            assert srv.manager.active == 1 and Scripted.closed == 0


async def test_oversized_answer_ends_the_stream_with_resource_exhausted() -> None:
    """An answer above the client's receive limit: the stream ends, the client says why."""
    async with running(Scripted) as srv:
        env = openenv.EnvClient(srv.address, max_message_bytes=32 * 1024)
        async with env:
            await env.reset()
            with pytest.raises(openenv.ResourceExhausted) as exc:
                await env.step({"op": "big", "n": 64 * 1024})
            assert exc.value.fatal
            with pytest.raises(openenv.EnvError):
                await env.state()
        await wait_until(lambda: srv.manager.active == 0, what="the session to be freed")


async def test_answer_over_the_servers_limit_is_answered_in_band_with_resource_exhausted() -> None:
    """The server sends nothing above its own max_message_bytes: an observation that big is
    answered RESOURCE_EXHAUSTED in band (RFC 0003), not fatal; the session and the server
    live on."""
    limit = 64 * 1024
    async with running(Scripted, max_message_bytes=limit) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.ResourceExhausted) as exc:
                await env.step({"op": "big", "n": limit + 1})
            assert not exc.value.fatal
            assert len((await env.step({"op": "big", "n": 10})).observation) == 10
        await wait_released(srv, Scripted)
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            assert len((await env.step({"op": "big", "n": 1000})).observation) == 1000


# --------------------------------------------------------------------------- DEADLINE_EXCEEDED


async def _assert_aborted_then_recovers(env: openenv.EnvClient, action: object) -> None:
    st = await env.state()
    assert st.status is openenv.EpisodeStatus.ABORTED and st.step_count == 0
    with pytest.raises(openenv.FailedPrecondition) as exc:
        await env.step(action)
    assert "aborted" in exc.value.message
    r = await env.reset()
    assert r.step_count == 0
    assert (await env.state()).status is openenv.EpisodeStatus.RUNNING


async def test_deadline_exceeded_step_timeout_sync_env() -> None:
    async with running(Scripted) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.DeadlineExceeded) as exc:
                await env.step({"op": "block"}, step_timeout=0.05)
            assert not exc.value.fatal and "0.05" in exc.value.message
            Scripted.gate.set()  # let the abandoned worker thread finish
            await _assert_aborted_then_recovers(env, {"op": "echo", "value": 1})
            assert (await env.step({"op": "echo", "value": 1})).observation == 1


async def test_deadline_exceeded_step_timeout_async_env() -> None:
    async with running(AsyncSlow) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.DeadlineExceeded):
                await env.step({"s": 3600}, step_timeout=0.05)  # only the timeout can end it
            await wait_until(lambda: AsyncSlow.cancelled == 1, what="the timed-out coroutine to be cancelled")
            await _assert_aborted_then_recovers(env, {"s": 0})
            assert (await env.step({"s": 0})).observation == "done"


async def test_deadline_exceeded_tool_timeout_is_not_fatal() -> None:
    async with running(ToolEnv) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.DeadlineExceeded) as exc:
                await env.call_tool("nap", {"s": 3600}, tool_timeout=0.05)  # only the timeout can end it
            assert not exc.value.fatal
            st = await env.state()  # a side call does not abort the episode
            assert st.status is openenv.EpisodeStatus.RUNNING
            assert (await env.call_tool("add", {"a": 2, "b": 3})).data == 5


# --------------------------------------------------------------------------- NOT_FOUND / tools


async def test_not_found_unknown_tool_and_tool_errors() -> None:
    async with running(ToolEnv) as srv:
        async with openenv.EnvClient(srv.address) as env:
            names = [t.name for t in await env.list_tools()]
            assert names == ["add", "explode", "nap"]
            with pytest.raises(openenv.NotFound) as exc:
                await env.call_tool("subtract", {"a": 1, "b": 2})
            assert not exc.value.fatal and "subtract" in exc.value.message
            with pytest.raises(openenv.InvalidArgument):
                await env.call_tool("add", {"a": "two", "b": 2})
            with pytest.raises(openenv.InvalidArgument):
                await env.call_tool("add", {"a": 1, "b": 2, "c": 3})
            failed = await env.call_tool("explode")  # a failing tool is a result
            assert failed.is_error and "RuntimeError: tool blew up" in failed.text
            assert (await env.call_tool("add", {"a": 40, "b": 2})).data == 42


# --------------------------------------------------------------------------- UNIMPLEMENTED


async def test_unimplemented_tools_on_an_env_without_tools() -> None:
    async with running(Counter) as srv:
        assert not (await get_info(target(srv))).capabilities.tools
        async with openenv.EnvClient(srv.address) as env:
            with pytest.raises(openenv.Unimplemented) as exc:
                await env.list_tools()
            assert not exc.value.fatal
            with pytest.raises(openenv.Unimplemented):
                await env.call_tool("anything", {})
            assert (await env.reset(seed=1)).observation["total"] == 1


async def test_unimplemented_simulation_requests_in_tools_only_mode() -> None:
    async with running(ToolEnv, tools_only=True) as srv:
        caps = (await get_info(target(srv))).capabilities
        assert caps.tools and caps.tools_only
        async with RawSession(target(srv)) as s:
            await s.open()
            assert_error(await s.request(**RESET), ErrorCode.UNIMPLEMENTED)
            assert_error(await s.request(**STATE), ErrorCode.UNIMPLEMENTED)
            assert_error(await s.request(**step_req(json_payload(1))), ErrorCode.UNIMPLEMENTED)
            # §3.5 ordering: an unsupported kind (3) is reported before a malformed payload (4)
            bad = payload_pb2.Payload(tensor=payload_pb2.Tensor(dtype=0, shape=[2], data=b"x"))
            assert_error(await s.request(**step_req(bad)), ErrorCode.UNIMPLEMENTED)
            tools = ok(await s.request(list_tools=tool_pb2.ListToolsRequest()), "list_tools")
            assert [t.name for t in tools.tools] == ["add", "explode", "nap"]
            call = tool_pb2.CallToolRequest(name="add")
            call.arguments.update({"a": 1, "b": 1})
            res = ok(await s.request(call_tool=call), "call_tool")
            assert res.name == "add" and res.result.structured_content["result"] == 2


# --------------------------------------------------------------------------- INTERNAL


async def test_internal_environment_raises() -> None:
    async with running(Failing) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            for _ in range(3):
                with pytest.raises(openenv.Internal) as exc:
                    await env.step({"anything": True})
                assert "ValueError: boom" in exc.value.message and not exc.value.fatal
            st = await env.state()
            assert st.step_count == 0 and st.status is openenv.EpisodeStatus.RUNNING
            assert (await env.reset()).observation == "ready"
        assert (await get_info(target(srv))).name == "failing"  # the server is alive
        await wait_released(srv, Failing)


async def test_internal_result_that_does_not_encode_keeps_the_stream() -> None:
    """An environment returning a value of the wrong type (or metadata that is not
    JSON-like) gets INTERNAL for that request; the stream survives."""
    async with running(MessageEnv) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(**RESET), "reset")
            p = payload_pb2.Payload()
            p.message.Pack(tool_pb2.TextContent(text="wrong-type"))
            assert_error(await s.request(**step_req(p)), ErrorCode.INTERNAL, contains="TypeError")
            await assert_usable(s)
    async with running(Scripted) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.Internal, match="not JSON-like"):
                await env.step({"op": "bad_metadata"})
            assert (await env.step({"op": "echo", "value": "fine"})).observation == "fine"


async def test_internal_non_numeric_reward() -> None:
    async with running(Scripted) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            with pytest.raises(openenv.Internal, match="reward"):
                await env.step({"op": "reward", "value": "high"})
            assert (await env.step({"op": "reward", "value": 1})).reward == 1.0


# --------------------------------------------------------------------------- UNAVAILABLE


async def test_unavailable_while_draining() -> None:
    srv = openenv.Server(Scripted, "127.0.0.1", 0)
    await srv.start()
    stopping: asyncio.Task[None] | None = None
    try:
        env = openenv.EnvClient(srv.address)
        await env.connect()
        await env.reset()
        in_progress = asyncio.ensure_future(env.step({"op": "block"}))
        await wait_until(Scripted.entered.is_set, what="the step to start")
        stopping = asyncio.ensure_future(srv.stop(WAIT_S))
        await wait_until(lambda: srv.manager.draining, what="the drain to start")
        async with RawSession(target(srv)) as s:  # new handshakes are refused in band
            assert_error(await s.handshake(), ErrorCode.UNAVAILABLE, fatal=True)
            assert (await s.ended()).code == grpc.StatusCode.OK
        Scripted.gate.set()  # the request in progress finishes and is answered
        r = await asyncio.wait_for(in_progress, WAIT_S)
        assert r.observation == "unblocked"
        err = await until_raises(env.state, openenv.Unavailable)  # then the stream ends with UNAVAILABLE
        assert isinstance(err, openenv.Unavailable) and err.fatal
        await env.close()
        await asyncio.wait_for(stopping, WAIT_S + 5)
        assert Scripted.closed == 1 and srv.manager.active == 0
    finally:
        Scripted.gate.set()
        if stopping is None:
            await srv.stop(1.0)


async def test_unavailable_raw_stream_status_on_drain() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ok(await s.request(**RESET), "reset")
            await asyncio.wait_for(srv.stop(2.0), WAIT_S)
            ended = await s.ended()
            assert ended.code == grpc.StatusCode.UNAVAILABLE
        assert Counter.closed == 1


# --------------------------------------------------------------------------- values


async def test_rewards_none_stays_none_bool_becomes_float() -> None:
    async with running(Scripted) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            ts = ok(await s.request(**RESET), "reset").time_step
            assert not ts.HasField("reward")
            ts = ok(await s.request(**step_req(json_payload({"op": "reward", "value": None}))), "step").time_step
            assert not ts.HasField("reward")  # unset on the wire, not 0
            ts = ok(await s.request(**step_req(json_payload({"op": "reward", "value": 0}))), "step").time_step
            assert ts.HasField("reward") and ts.reward == 0.0
        async with openenv.EnvClient(srv.address) as env:
            assert (await env.reset()).reward is None
            r = await env.step({"op": "reward", "value": None})
            assert r.reward is None
            r = await env.step({"op": "reward", "value": True})
            assert r.reward == 1.0 and type(r.reward) is float
            r = await env.step({"op": "reward", "value": False})
            assert r.reward == 0.0 and type(r.reward) is float
            r = await env.step({"op": "reward", "value": 0})
            assert r.reward == 0.0 and r.reward is not None
            r = await env.step({"op": "reward", "value": -2.5})
            assert r.reward == -2.5


async def test_metadata_round_trips_intact() -> None:
    meta = {
        "text": "héllo ✓",
        "int": 7,
        "neg": -3,
        "big": 2**53,
        "float": 0.25,
        "bool": True,
        "none": None,
        "list": [1, "two", [3.5, None], {"k": False}],
        "nested": {"a": {"b": {"c": []}}},
        "empty": {},
        "": "empty key",
    }
    async with running(Scripted) as srv:
        async with openenv.EnvClient(srv.address) as env:
            await env.reset()
            r = await env.step({"op": "meta", "value": meta})
            assert r.metadata == meta
            assert type(r.metadata["int"]) is int and type(r.metadata["float"]) is float
            r = await env.step({"op": "echo", "value": meta})  # observations too
            assert r.observation == meta and r.metadata == {}
