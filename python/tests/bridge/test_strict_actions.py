"""Strict action validation (RFC 0007): an action of a Python type is accepted only when it is
exactly a value of the advertised JSON Schema, over gRPC and over OpenEnv's JSON protocol;
``lenient_actions`` opts out and is advertised."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pydantic
import pytest
from bridge_kit import Ws, served, ws_url
from openenv_testkit import RawSession, error_of, ok

import openenv
from openenv.runtime.codec import to_value
from openenv.v1 import environment_pb2, payload_pb2

pytestmark = [pytest.mark.anyio]


@dataclasses.dataclass
class Guess:
    guess: int
    note: str = ""


class GuessModel(pydantic.BaseModel):
    guess: int


class GuessDict(typing.TypedDict):
    guess: int


class Result(typing.TypedDict):
    """A sum (a ``typing.TypedDict``, which pydantic refuses before Python 3.12)."""

    total: int


def guess_env(action: Any, lenient: bool = False) -> type[openenv.Environment]:
    class GuessEnv(openenv.Environment):
        """Counts guesses; the observation echoes the guess it parsed."""

        name = "guess"
        action_type = action
        lenient_actions = lenient
        max_sessions = 4

        def reset(self, **kw: object) -> dict[str, int]:
            return {"last": 0}

        def step(self, action: Any) -> dict[str, Any]:
            g = action["guess"] if isinstance(action, dict) else action.guess
            return {"last": g, "type": type(g).__name__}

    return GuessEnv


REFUSED = [
    ({"guess": "7"}, "guess"),
    ({"guess": True}, "guess"),
    ({"guess": 7.5}, "guess"),
    ({"guess": 7, "gues": 1}, "'gues'"),
    ({"gues": 7}, "'gues'"),
]


def json_payload(value: Any) -> payload_pb2.Payload:
    p = payload_pb2.Payload()
    to_value(value, p.json)
    return p


@pytest.mark.parametrize("action", [Guess, GuessModel, GuessDict], ids=["dataclass", "pydantic", "typeddict"])
async def test_strict_actions_refuse_coercion_and_unknown_fields_over_grpc_and_ws(action: Any) -> None:
    async with served(guess_env(action)) as srv:
        assert srv.address is not None and srv.http_url is not None
        async with RawSession(srv.address.removeprefix("grpc://")) as s:
            hs = await s.open()
            schema = openenv.runtime.codec.from_struct(hs.info.action.json_schema)
            assert schema["additionalProperties"] is False, "the advertised schema is closed"
            assert hs.info.capabilities.lenient_actions is False
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")
            for value, named in REFUSED:
                err = error_of(await s.request(step=environment_pb2.StepRequest(action=json_payload(value))))
                assert err.code == 3 and not err.fatal, (value, err)  # INVALID_ARGUMENT, the session lives
                assert named in err.message, (value, err.message)
            st = ok(await s.request(state=environment_pb2.StateRequest()), "state")
            assert st.step_count == 0, "refused actions are not counted"
            good = ok(await s.request(step=environment_pb2.StepRequest(action=json_payload({"guess": 7}))), "step")
            assert openenv.runtime.codec.from_value(good.time_step.observation.json) == {"last": 7, "type": "int"}
        async with Ws(ws_url(srv.http_url)) as ws:
            assert (await ws.ask({"type": "reset", "data": {}}))["type"] == "observation"
            for value, named in REFUSED:
                r = await ws.ask({"type": "step", "data": value})
                assert r["type"] == "error" and r["data"]["code"] == "VALIDATION_ERROR", (value, r)
                assert named in r["data"]["message"], (value, r)
            # OpenEnv's Action.metadata is framing, not an unknown field
            r = await ws.ask({"type": "step", "data": {"guess": 3, "metadata": {}}})
            assert r["type"] == "observation" and r["data"]["observation"]["last"] == 3, r
            assert r["data"]["step_count"] == 1


async def test_lenient_actions_coerce_drop_unknown_fields_and_are_advertised() -> None:
    async with served(guess_env(Guess, lenient=True)) as srv:
        assert srv.address is not None
        async with RawSession(srv.address.removeprefix("grpc://")) as s:
            hs = await s.open()
            assert hs.info.capabilities.lenient_actions is True
            schema = openenv.runtime.codec.from_struct(hs.info.action.json_schema)
            assert "additionalProperties" not in schema
            ok(await s.request(reset=environment_pb2.ResetRequest()), "reset")
            r = ok(
                await s.request(step=environment_pb2.StepRequest(action=json_payload({"guess": "7", "x": 1}))), "step"
            )
            assert openenv.runtime.codec.from_value(r.time_step.observation.json) == {"last": 7, "type": "int"}


def test_a_typeddict_tool_result_advertises_its_output_schema() -> None:
    class Calc(openenv.Environment):
        @openenv.tool
        def add(self, a: int, b: int) -> Result:
            """Add.

            Args:
                a: first.
                b: second.
            """
            return {"total": a + b}

    schema = Calc.tools()["add"].descriptor.output_schema
    assert schema is not None and schema["properties"] == {"total": {"type": "integer"}}


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0


@dataclasses.dataclass
class Move:
    to: Point
    tags: list[str] = dataclasses.field(default_factory=list)


def test_nested_objects_are_closed_and_exact() -> None:
    codec = openenv.runtime.codec_for(Move)
    schema = codec.json_schema()
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Point"]["additionalProperties"] is False
    assert codec.from_json({"to": {"x": 1, "y": 2}}) == Move(Point(1, 2.0))
    for bad, named in (
        ({"to": {"x": 1, "z": 0}}, "'z'"),
        ({"to": {"x": True}}, "to.x"),
        ({"to": {"x": 1, "y": True}}, "to.y"),
        ({"to": {"x": 1}, "tags": ["a", 1]}, "tags.1"),
    ):
        with pytest.raises(openenv.InvalidArgument) as e:
            codec.from_json(bad)
        assert named in e.value.message, (bad, e.value.message)
