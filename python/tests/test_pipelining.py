"""Request/response pairing (docs/protocol.md §4): ids echoed, answers in request order,
pipelining, and client-side timeouts that never desync the stream. The client's tests run
over gRPC and over the in-process connection (openenv.testing): the same guarantees."""

from __future__ import annotations

import asyncio
import random

import pytest
from openenv_testenvs import Counter, Scripted
from openenv_testkit import TRANSPORTS, WAIT_S, RawSession, running, serving, target, wait_released

import openenv
from openenv.v1 import environment_pb2, payload_pb2
from openenv.values import from_value, to_value

pytestmark = [pytest.mark.anyio, pytest.mark.timing]


def _step(delta: int) -> environment_pb2.SessionRequest:
    action = payload_pb2.Payload(json=to_value({"delta": delta}))
    return environment_pb2.SessionRequest(step=environment_pb2.StepRequest(action=action))


async def test_raw_pipelined_requests_are_answered_in_order_with_their_ids() -> None:
    rng = random.Random(1234)
    ids = rng.sample(range(1, 2**63), 50)  # distinct, not sequential, large
    deltas = [rng.randint(-20, 20) for _ in range(50)]
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            plan: list[tuple[int, str]] = []
            reqs = []
            for i, rid in enumerate(ids):
                if i == 0:
                    req = environment_pb2.SessionRequest(reset=environment_pb2.ResetRequest(seed=100))
                    kind = "reset"
                elif i % 5 == 0:
                    req, kind = environment_pb2.SessionRequest(state=environment_pb2.StateRequest()), "state"
                else:
                    req, kind = _step(deltas[i]), "step"
                req.request_id = rid
                reqs.append(req)
                plan.append((rid, kind))
            for req in reqs:  # everything is written before anything is read
                await s.send(req)
            total, steps = 100, 0
            for i, (rid, kind) in enumerate(plan):
                resp = await s.recv()
                assert resp.request_id == rid
                assert resp.WhichOneof("kind") == kind, resp
                if kind == "step":
                    total += deltas[i]
                    steps += 1
                    ts = resp.step.time_step
                    assert from_value(ts.observation.json) == {"total": total, "tag": ""}
                    assert ts.step_count == steps
                elif kind == "state":
                    assert resp.state.step_count == steps
                    assert from_value(resp.state.state.json)["total"] == total
            await s.call.done_writing()  # half-close: the stream ends cleanly
            assert (await s.ended()).code.name == "OK"
        await wait_released(srv, Counter)


async def test_repeated_request_ids_are_echoed_not_interpreted() -> None:
    async with running(Counter) as srv:
        async with RawSession(target(srv)) as s:
            await s.open()
            for _ in range(3):  # the server does not interpret ids, even reused ones (and 0)
                for rid in (7, 7, 0):
                    req = environment_pb2.SessionRequest(request_id=rid, state=environment_pb2.StateRequest())
                    await asyncio.wait_for(s.call.write(req), WAIT_S)
                for rid in (7, 7, 0):
                    assert (await s.recv()).request_id == rid


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_gather_pipelines_steps_in_call_order(transport: str) -> None:
    async with serving(transport, Counter) as (_, make):
        async with make() as env:
            await env.reset(seed=0)
            n = 200
            results = await asyncio.wait_for(
                asyncio.gather(*(env.step(Counter.action_type(delta=i)) for i in range(1, n + 1))), WAIT_S * 3
            )
            # effects are applied in call order: the k-th step sees the sum 1..k
            assert [r.observation["total"] for r in results] == [k * (k + 1) // 2 for k in range(1, n + 1)]
            assert [r.step_count for r in results] == list(range(1, n + 1))
            assert [r.reward for r in results] == [float(i) for i in range(1, n + 1)]
            st = await env.state()
            assert st.step_count == n and st.state["history"] == list(range(1, n + 1))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mixed_concurrent_calls_each_get_their_own_answer(transport: str) -> None:
    async with serving(transport, Counter) as (_, make):
        async with make() as env:
            await env.reset()
            calls = []
            for i in range(30):
                calls.append(env.step({"delta": 1}) if i % 2 else env.state())
            out = await asyncio.wait_for(asyncio.gather(*calls), WAIT_S)
            for i, r in enumerate(out):
                if i % 2:
                    assert isinstance(r, openenv.StepResult)
                    assert r.step_count == (i + 1) // 2
                else:
                    assert isinstance(r, openenv.SessionState)
                    assert r.step_count == i // 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_side_timeout_does_not_desync_later_calls(transport: str) -> None:
    async with serving(transport, Scripted) as (_, make):
        async with make() as env:
            await env.reset()
            with pytest.raises(openenv.DeadlineExceeded) as exc:
                # the environment blocks until the test opens the gate: the client gives up first
                await env.step({"op": "block"}, timeout=0.05)
            assert not exc.value.fatal
            Scripted.gate.set()  # the late answer now arrives and must be discarded
            st = await env.state()  # gets its own answer, not the late step's
            assert isinstance(st, openenv.SessionState)
            assert st.step_count == 1  # the work did finish on the server
            r = await env.step({"op": "echo", "value": "after"})
            assert r.observation == "after" and r.step_count == 2
            r = await env.step({"op": "echo", "value": [1, 2]})
            assert r.observation == [1, 2] and r.step_count == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_side_timeout_many_in_flight(transport: str) -> None:
    """Several requests time out while queued behind a blocked one; every later call
    still receives its own answer."""
    async with serving(transport, Scripted) as (_, make):
        async with make() as env:
            await env.reset()
            blocked = asyncio.ensure_future(env.step({"op": "block"}, timeout=0.05))
            queued = [asyncio.ensure_future(env.step({"op": "echo", "value": i}, timeout=0.05)) for i in range(5)]
            for f in (blocked, *queued):
                with pytest.raises(openenv.DeadlineExceeded):
                    await asyncio.wait_for(f, WAIT_S)
            Scripted.gate.set()
            values = await asyncio.gather(*(env.step({"op": "echo", "value": f"v{i}"}) for i in range(5)))
            assert [v.observation for v in values] == [f"v{i}" for i in range(5)]
            assert [v.step_count for v in values] == [7, 8, 9, 10, 11]
