"""The certifier's own tables (openenv_conformance.tables, restated from docs/protocol.md and
docs/bridge.md) against openenv's (openenv.errors, openenv.json_protocol).

The certifier must not judge a server by the server's own tables: a mistake there would be
shared by both and go unseen. So the tables exist twice, and this test says where they
differ: a change to the protocol's errors or frames is made in the document, in openenv and
in the certifier, on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from conformance_testlib import ROOT

from openenv.errors import EnvError, ErrorCode, Internal
from openenv.json_protocol import frames, jsonrpc
from openenv.json_protocol.frames import FrameTranslator, JsonStep
from openenv.runtime import grading
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import error_pb2, tool_pb2
from openenv.values import to_struct
from openenv_conformance import tables
from openenv_conformance.errors import Violation
from openenv_conformance.model import EpisodeModel
from openenv_conformance.spec import EnvSpec
from openenv_conformance.transport import PROTOCOL_VERSION

_MISSING = "<missing>"


def _differences(restated: Mapping[Any, Any], openenv: Mapping[Any, Any]) -> list[str]:
    """``key: restated ... / openenv ...`` for every entry that differs or is in one table only."""
    out = []
    for key in sorted(set(restated) | set(openenv), key=repr):
        ours, theirs = restated.get(key, _MISSING), openenv.get(key, _MISSING)
        if ours != theirs:
            out.append(f"{key!r}: certifier {ours!r}, openenv {theirs!r}")
    return out


def _frame_types() -> dict[str, str | None]:
    """The request frames openenv's translator writes, with the type of the reply openenv's
    bridge writes (None: no reply)."""
    translator = FrameTranslator(pb.EnvironmentInfo(), extended=True)
    call = tool_pb2.CallToolRequest(name="t")
    to_struct({"x": 1}, call.arguments)
    requests = [
        pb.SessionRequest(reset=pb.ResetRequest()),
        pb.SessionRequest(state=pb.StateRequest()),
        pb.SessionRequest(list_tools=tool_pb2.ListToolsRequest()),
        pb.SessionRequest(call_tool=call),
        pb.SessionRequest(close=pb.CloseRequest()),
    ]
    step = pb.SessionRequest(step=pb.StepRequest())
    step.step.action.json.number_value = 1
    requests.append(step)
    replies = {
        "reset": frames.observation_frame(JsonStep(observation={}), 1)["type"],
        "step": frames.observation_frame(JsonStep(observation={}), 1)["type"],
        "state": frames.state_frame("", 0, "NOT_STARTED", None, 1)["type"],
        "mcp": "mcp",
    }  # the bridge answers an mcp frame with an mcp frame (openenv.http.ws)
    out: dict[str, str | None] = {}
    for req in requests:
        o = translator.encode(req)
        typ = o.frame["type"]
        out[typ] = replies.get(typ) if o.reply else None
    return out


def _rpc_methods() -> dict[str, str]:
    translator = FrameTranslator(pb.EnvironmentInfo(), extended=True)
    return {
        kind: translator.encode(pb.SessionRequest(**{kind: msg})).frame["data"]["method"]
        for kind, msg in (
            ("list_tools", tool_pb2.ListToolsRequest()),
            ("call_tool", tool_pb2.CallToolRequest(name="t")),
        )
    }


def _rpc_reading(read: Callable[[int, str], str]) -> dict[tuple[int, str], str]:
    """How a JSON-RPC error naming no status is read, for every code and the messages that
    refine it."""
    messages = ("boom", "Unknown tool: nope", "tool 'nope' not found", "Environment does not support MCP")
    return {(code, m): read(code, m) for code in (*tables.RPC_CODES.values(), -1) for m in messages}


def _comparisons() -> list[tuple[str, str, Mapping[Any, Any], Mapping[Any, Any]]]:
    """(table, where the document states it, the certifier's, openenv's)."""
    no_frame = {name for name, ws in tables.WS_CODE.items() if ws is None}
    return [
        (
            "ERROR_CODES",
            "docs/protocol.md §5.2 The error table",
            tables.ERROR_CODES,
            {c.name: c.value for c in ErrorCode},
        ),
        (
            "ERROR_CODES",
            "docs/protocol.md §5.2 (openenv.v1.ErrorCode, the contract)",
            tables.ERROR_CODES,
            {n.removeprefix("ERROR_CODE_"): v for n, v in error_pb2.ErrorCode.items() if v},
        ),
        # A code the document sends no frame for (CANCELLED: the socket is gone) constrains
        # nothing: openenv may keep a fallback for it.
        (
            "WS_CODE",
            "docs/protocol.md §5.2 column Bridge; docs/bridge.md Errors",
            {k: v for k, v in tables.WS_CODE.items() if v is not None},
            {c.name: v for c, v in frames.WS_CODE.items() if c.name not in no_frame},
        ),
        (
            "WS_CODE (ws_code of every code, at open too)",
            "docs/bridge.md Errors",
            {
                (name, at_open): (tables.WS_CODE_AT_OPEN if at_open and name == "INTERNAL" else ws)
                for name, ws in tables.WS_CODE.items()
                if ws is not None
                for at_open in (False, True)
            },
            {
                (c.name, at_open): frames.ws_code(EnvError("x", code=c), at_open=at_open)
                for c in ErrorCode
                if c.name not in no_frame
                for at_open in (False, True)
            },
        ),
        (
            "FROM_WS_CODE",
            "docs/bridge.md Errors; docs/protocol.md §5.2 column Fatal, notes",
            tables.FROM_WS_CODE,
            {ws: (code.name, fatal) for ws, (code, fatal) in frames.FROM_WS_CODE.items()},
        ),
        ("HELLO", "docs/bridge.md Beyond OpenEnv (openenv.hello)", {"type": tables.HELLO}, frames.HELLO),
        ("REPLY_TYPE", "docs/bridge.md /ws frames", tables.REPLY_TYPE, _frame_types()),
        (
            "ERROR_TYPE",
            "docs/bridge.md Errors",
            {"type": tables.ERROR_TYPE},
            {"type": frames.error_frame(Internal("x"))["type"]},
        ),
        (
            "OBSERVATION_KEYS",
            "docs/bridge.md /ws frames (an observation reply)",
            dict.fromkeys(tables.OBSERVATION_KEYS, True),
            dict.fromkeys(frames.observation_frame(JsonStep(observation={}), 1)["data"], True),
        ),
        (
            "STATE_KEYS",
            "docs/bridge.md Beyond OpenEnv (the extended state)",
            dict.fromkeys(tables.STATE_KEYS, True),
            dict.fromkeys(frames.state_frame("e", 1, "RUNNING", {}, 1)["data"], True),
        ),
        ("RPC_METHODS", "docs/bridge.md /mcp", tables.RPC_METHODS, _rpc_methods()),
        (
            "RPC_CODES",
            "docs/bridge.md /mcp",
            tables.RPC_CODES,
            {
                name: getattr(jsonrpc, name)
                for name in (
                    "PARSE_ERROR",
                    "INVALID_REQUEST",
                    "METHOD_NOT_FOUND",
                    "INVALID_PARAMS",
                    "INTERNAL_ERROR",
                    "SERVER_ERROR",
                )
            },
        ),
        (
            "RPC_CODE",
            "docs/bridge.md /mcp",
            {name: tables.RPC_CODE.get(name, tables.RPC_CODES["INTERNAL_ERROR"]) for name in tables.ERROR_CODES},
            {c.name: jsonrpc.RPC_CODE.get(c, jsonrpc.INTERNAL_ERROR) for c in ErrorCode},
        ),
        (
            "FROM_RPC_CODE (rpc_status_name)",
            "docs/bridge.md /mcp",
            _rpc_reading(tables.rpc_status_name),
            _rpc_reading(lambda code, message: jsonrpc.error_from_rpc({"code": code, "message": message}).code.name),
        ),
        (
            "GRADING_* and FEEDBACK_* (the grading annotation and feedback levels)",
            "docs/protocol.md §7.1",
            {
                "annotation": tables.GRADING_ANNOTATION,
                "languages": tables.GRADING_LANGUAGES,
                "option": tables.FEEDBACK_OPTION,
                "levels": tuple(tables.FEEDBACK_LEVELS),
                "enums": tuple(tables.FEEDBACK_LEVELS.values()),
            },
            {
                "annotation": grading.GRADING_ANNOTATION,
                "languages": grading.GRADING_LANGUAGES,
                "option": grading.OPTIONS_KEY,
                "levels": grading.FEEDBACK_LEVELS,
                "enums": tuple(pb.Feedback.Name(v) for v in pb.Feedback.values() if v),
            },
        ),
    ]
    # tables.CLOSE_CODES has no counterpart in openenv (the bridge closes with literal codes,
    # openenv's client reads any close as UNAVAILABLE); the certification itself observes them.


def test_restated_tables_match_openenv() -> None:
    problems = []
    for name, section, restated, openenv in _comparisons():
        diff = _differences(restated, openenv)
        if diff:
            problems.append(f"tables.{name} ({section}):\n    " + "\n    ".join(diff))
    assert not problems, (
        "the certifier's tables (openenv_conformance/tables.py) and openenv's differ:\n  "
        + "\n  ".join(problems)
        + "\nA change to the protocol's errors or frames is made three times, on purpose: in the document, in "
        "openenv (openenv.errors, openenv.json_protocol) and in openenv_conformance.tables."
    )


def test_a_drift_is_caught() -> None:
    """One entry changed on one side only is reported with both values."""
    drifted = dict(tables.FROM_WS_CODE, EXECUTION_ERROR=("FAILED_PRECONDITION", False))
    openenv = {ws: (code.name, fatal) for ws, (code, fatal) in frames.FROM_WS_CODE.items()}
    assert _differences(drifted, openenv) == [
        "'EXECUTION_ERROR': certifier ('FAILED_PRECONDITION', False), openenv ('INTERNAL', False)"
    ]
    assert _differences({**tables.ERROR_CODES, "OUT_OF_RANGE": 11}, {c.name: c.value for c in ErrorCode}) == [
        "'OUT_OF_RANGE': certifier 11, openenv '<missing>'"
    ]


def test_the_restated_tables_agree_with_each_other() -> None:
    """Reading a frame's WSErrorCode back gives the code that the error table sends it for."""
    for ws, (name, _fatal) in tables.FROM_WS_CODE.items():
        if ws == "INVALID_JSON":  # the bridge's own: no code of the table sends it
            assert name == "INVALID_ARGUMENT"
        elif ws == tables.WS_CODE_AT_OPEN:
            assert name == "INTERNAL"
        else:
            assert tables.WS_CODE[name] == ws, (ws, name)
    assert set(tables.WS_CODE) == set(tables.ERROR_CODES)
    assert set(tables.RPC_CODE) <= set(tables.ERROR_CODES)
    assert set(tables.FROM_RPC_CODE) <= set(tables.RPC_CODES.values())
    assert tables.close_status(1000).name == "OK" and tables.close_status(4000).name == "UNKNOWN"


# --------------------------------------------------------------------------- the contract's data


def _data(name: str) -> Any:
    return json.loads((ROOT / "proto" / "tables" / f"{name}.json").read_text(encoding="utf-8"))


def _data_comparisons() -> list[tuple[str, Mapping[Any, Any], Mapping[Any, Any]]]:
    """(table, the certifier's, the contract's data in proto/tables/)."""
    features = _data("features")
    return [
        ("ERROR_CODES", tables.ERROR_CODES, {r["name"]: r["number"] for r in _data("errors")["codes"]}),
        ("WS_CODE", tables.WS_CODE, {r["name"]: r["ws_code"] for r in _data("errors")["codes"]}),
        (
            "FEATURES",
            tables.FEATURES,
            {
                f["id"]: (
                    f["minor"],
                    f["advertised"]["field"] if f["advertised"] else None,
                    f["advertised"]["min"] if f["advertised"] else 0,
                )
                for f in features["features"]
            },
        ),
        (
            "TRANSPORTS",
            dict.fromkeys(tables.TRANSPORTS, True),
            dict.fromkeys((t["id"] for t in features["transports"]), True),
        ),
        (
            "PROTOCOL_VERSION (openenv_conformance.transport)",
            {"version": PROTOCOL_VERSION},
            {
                "version": max(
                    (f["minor"] for f in features["features"] if f["minor"]), key=lambda v: int(v.split(".")[1])
                )
            },
        ),
    ]


def test_restated_tables_match_the_contracts_data() -> None:
    problems = []
    for name, restated, data in _data_comparisons():
        diff = _differences(restated, data)
        if diff:
            problems.append(f"tables.{name}:\n    " + "\n    ".join(diff).replace("openenv ", "proto/tables "))
    assert not problems, (
        "the certifier's tables (openenv_conformance/tables.py) and the contract's data (proto/tables/*.json) "
        "differ:\n  " + "\n  ".join(problems)
    )


def _ts(episode_id: str, step_count: int, **flags: bool) -> pb.TimeStep:
    return pb.TimeStep(episode_id=episode_id, step_count=step_count, **flags)


def _error(code: str) -> pb.SessionResponse:
    return pb.SessionResponse(error=error_pb2.Status(code=tables.ERROR_CODES[code], message="x"))


def _model_disagreements(transitions: list[dict[str, Any]]) -> list[str]:
    """Where the certifier's episode model (openenv_conformance.model.EpisodeModel) and the
    transitions of proto/tables/sessions.json differ: each transition's answer is fed to a model
    in its source status, which must accept it and land where the data says. The model has no
    step timeouts (lifecycle.timeout_aborts restates that row itself)."""
    out = []
    for t in transitions:
        if t["event"] == "step_times_out":
            continue
        for auto in (False, True) if t["auto_reset"] is None else (t["auto_reset"],):
            for source in t["from"]:
                model = EpisodeModel(EnvSpec(pb.EnvironmentInfo(capabilities=pb.Capabilities(auto_reset=auto))))
                if source != "NOT_STARTED":
                    model.episode_id, model.step_count = "a" * 32, 3
                model.status = source
                before = (model.episode_id, model.step_count, model.status)
                where = f"{source} --{t['event']} (auto_reset {auto})"
                answers = []
                for answer in t["answer"].split("|"):
                    if answer in tables.ERROR_CODES:
                        answers.append(_error(answer))
                    elif answer == "reset_time_step" or t["event"] == "reset":
                        kind = "reset" if t["event"] == "reset" else "step"
                        answers.append(pb.SessionResponse(**{kind: {"time_step": _ts("b" * 32, 0)}}))
                    elif answer == "time_step":
                        flags = {"step_terminates": {"terminated": True}, "step_truncates": {"truncated": True}}
                        step = _ts(model.episode_id, model.step_count + 1, **flags.get(t["event"], {}))
                        answers.append(pb.SessionResponse(step=pb.StepResponse(time_step=step)))
                    else:  # state
                        status = pb.EpisodeStatus.Value(f"EPISODE_STATUS_{source}")
                        answers.append(
                            pb.SessionResponse(
                                state=pb.StateResponse(
                                    episode_id=model.episode_id, step_count=model.step_count, status=status
                                )
                            )
                        )
                for resp in answers:
                    model.episode_id, model.step_count, model.status = before
                    try:
                        if t["event"] == "reset":
                            model.on_reset(resp)
                        elif t["event"] == "state":
                            model.on_state(resp)
                        else:
                            model.on_step(resp)
                    except Violation as e:
                        out.append(f"{where}: the model refuses {resp.WhichOneof('kind')}: {e}")
                        continue
                    to = source if t["to"] == "same" else t["to"]
                    count = {"0": 0, "+1": before[1] + 1, "same": before[1]}[t["step_count"]]
                    if (model.status, model.step_count) != (to, count):
                        out.append(
                            f"{where}: the model lands in {model.status}/{model.step_count}, the data {to}/{count}"
                        )
    return out


def test_the_certifiers_episode_model_makes_the_datas_transitions() -> None:
    transitions = _data("sessions")["episode_transitions"]
    assert not _model_disagreements(transitions)
    wrong = [dict(t, to="TERMINATED") for t in transitions if t["event"] == "step_rejected"]
    assert any("the model lands in RUNNING/3, the data TERMINATED/3" in d for d in _model_disagreements(wrong))
    refused = [dict(t, answer="FAILED_PRECONDITION") for t in transitions if t["event"] == "state"]
    assert any("the model refuses error" in d for d in _model_disagreements(refused))
