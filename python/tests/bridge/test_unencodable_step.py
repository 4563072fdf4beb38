"""A step whose result cannot be encoded (a ``set`` in its metadata) is answered INTERNAL and
is not counted (docs/protocol.md §3.5: a step answered with an error changes nothing), over
gRPC and over OpenEnv's frames."""

from __future__ import annotations

from typing import Any

import pytest
from bridge_kit import Ws, served, ws_url
from openenv_testkit import RawSession, error_of, ok

import openenv
from openenv.runtime.codec import to_value
from openenv.v1 import environment_pb2, payload_pb2

pytestmark = [pytest.mark.anyio]


class Unencodable(openenv.Environment):
    """``{"bad": true}`` steps return metadata holding a set and an object; other steps are fine."""

    name = "unencodable"
    max_sessions = 4

    def reset(self, **kw: object) -> dict[str, int]:
        return {"n": 0}

    def step(self, action: dict[str, Any]) -> openenv.StepResult:
        meta: dict[str, Any] = {"tags": {1, 2}, "handle": object()} if action.get("bad") else {}
        return openenv.StepResult({"n": 1}, reward=1.0, metadata=meta)


def _payload(value: Any) -> payload_pb2.Payload:
    p = payload_pb2.Payload()
    to_value(value, p.json)
    return p


async def test_an_unencodable_step_is_internal_and_not_counted() -> None:
    async with served(Unencodable) as srv:
        assert srv.address is not None and srv.http_url is not None
        async with RawSession(srv.address.removeprefix("grpc://")) as s:
            await s.open()
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")
            err = error_of(await s.request(step=environment_pb2.StepRequest(action=_payload({"bad": True}))))
            assert err.code == 13 and not err.fatal and "cannot be encoded" in err.message, err
            st = ok(await s.request(state=environment_pb2.StateRequest()), "state")
            assert st.step_count == 0 and st.status == environment_pb2.EPISODE_STATUS_RUNNING
            ts = ok(await s.request(step=environment_pb2.StepRequest(action=_payload({}))), "step").time_step
            assert ts.step_count == 1
        async with Ws(ws_url(srv.http_url)) as ws:
            assert (await ws.ask({"type": "reset", "data": {}}))["type"] == "observation"
            r = await ws.ask({"type": "step", "data": {"bad": True}})
            assert r["type"] == "error" and r["data"]["status"] == "INTERNAL", r
            st = (await ws.ask({"type": "state", "id": "1"}))["data"]
            assert st["step_count"] == 0, st
            r = await ws.ask({"type": "step", "data": {}})
            assert r["type"] == "observation" and r["data"]["step_count"] == 1, r
