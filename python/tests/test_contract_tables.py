"""The contract's tables as data (proto/tables/*.json) against the contract, the Python binding,
the docs and the bindings' declarations.

* What is generated from the data (``openenv/_contract.py``, docs/protocol.md's tables, the
  matrix of docs/bindings.md) equals what ``make generate`` writes.
* The error table names exactly the codes of ``openenv.v1.ErrorCode``, and ``openenv.errors`` has
  exactly its classes, codes and retryability; a change to the table not made in Python fails.
* The feature matrix covers every ``Capabilities`` field, request kind, RPC and RFC, once; its
  newest minor is ``openenv.PROTOCOL_VERSION``; the harness-only fields are marked in the proto.
* The runtime's episode state machine follows every transition of the data, served in process
  by the protocol engine to a real client; a gRPC server follows every request rule of the data
  before and after the handshake (raw streams).
* Every binding's declaration is valid, and states the version its code speaks.

The TypeScript binding checks its own errors and state machine against the same data
(typescript/test/tables.test.ts); the certifier compares its own restatement
(conformance/tests/test_tables.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pytest
from openenv_testkit import REPO_ROOT, RawSession, running, target

import openenv
from openenv import _contract, errors
from openenv.testing import InProcessServer
from openenv.v1 import environment_pb2, error_pb2, tool_pb2


def _tools() -> ModuleType:
    """tools/contract_tables.py (stdlib only; not a package)."""
    name = "contract_tables"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / "contract_tables.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _data(name: str) -> Any:
    return json.loads((REPO_ROOT / "proto" / "tables" / f"{name}.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- generated


def test_what_is_generated_from_the_tables_is_fresh() -> None:
    stale = [str(p.relative_to(REPO_ROOT)) for p in _tools().stale()]
    assert not stale, f"stale, run `make generate` (tools/generate.py): {stale}"


def test_a_bad_row_is_refused_with_where_it_is(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ct = _tools()
    for name in ("errors", "sessions", "features"):
        (tmp_path / f"{name}.json").write_text(json.dumps(_data(name)))
    features = _data("features")
    features["features"][1]["capabilities"].append("max_sessions")  # already in the core row
    (tmp_path / "features.json").write_text(json.dumps(features))
    monkeypatch.setattr(ct, "TABLES", tmp_path)
    with pytest.raises(ct.TableError, match=r"features\[1\] \(vectorised_sessions\): capabilities 'max_sessions'"):
        ct.load()
    errs = _data("errors")
    errs["codes"][0]["delivery"] = "sometimes"
    (tmp_path / "features.json").write_text(json.dumps(_data("features")))
    (tmp_path / "errors.json").write_text(json.dumps(errs))
    with pytest.raises(ct.TableError, match=r"codes\[0\] \(INVALID_ARGUMENT\): delivery 'sometimes'"):
        ct.load()


# --------------------------------------------------------------------------- errors


def _error_differences(rows: list[Mapping[str, Any]]) -> list[str]:
    """Where the error table's data and the contract / openenv.errors differ."""
    out = []
    proto = {n.removeprefix("ERROR_CODE_"): v for n, v in error_pb2.ErrorCode.items() if v}
    data = {r["name"]: r["number"] for r in rows}
    if data != proto:
        out.append(f"codes: data {sorted(data.items())}, openenv.v1.ErrorCode {sorted(proto.items())}")
    classes = {
        c.__name__: c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.EnvError) and c is not errors.EnvError
    }
    named = set()
    for r in rows:
        cls = classes.get(r["class"])
        if cls is None:
            out.append(f"{r['name']}: openenv.errors has no class {r['class']}")
            continue
        named.add(r["class"])
        err = errors.EnvError.from_code(r["number"], "x")
        if type(err) is not cls or int(cls.code) != r["number"]:
            out.append(f"{r['name']}: from_code gives {type(err).__name__}, {r['class']}.code is {int(cls.code)}")
        if err.retryable is not r["retryable"]:
            out.append(f"{r['name']}: retryable is {err.retryable}, the table says {r['retryable']}")
        for sub in r.get("subclasses", []):
            named.add(sub["class"])
            if sub["class"] not in classes or not issubclass(classes[sub["class"]], cls):
                out.append(f"{r['name']}: openenv.errors has no {sub['class']}({r['class']})")
    extra = sorted(set(classes) - named)
    if extra:
        out.append(f"openenv.errors has classes the table does not name: {extra}")
    missing = sorted(named - set(errors.__all__))
    if missing:
        out.append(f"openenv.errors does not export {missing}")
    return out


def test_the_error_table_is_the_contract_and_openenv_errors() -> None:
    rows = _data("errors")["codes"]
    assert not _error_differences(rows)
    assert {(r.name, r.number, r.cls, r.retryable) for r in _contract.ERRORS} == {
        (r["name"], r["number"], r["class"], r["retryable"]) for r in rows
    }


def test_a_change_to_the_error_table_not_made_in_python_fails() -> None:
    rows = _data("errors")["codes"]
    added = [*rows, {"name": "OUT_OF_RANGE", "number": 11, "class": "OutOfRange", "retryable": False}]
    assert any("OUT_OF_RANGE" in d for d in _error_differences(added))
    assert any("openenv.errors has no class OutOfRange" in d for d in _error_differences(added))
    flipped = [dict(r, retryable=not r["retryable"]) if r["name"] == "INTERNAL" else r for r in rows]
    assert _error_differences(flipped) == ["INTERNAL: retryable is False, the table says True"]
    renamed = [dict(r, **{"class": "Boom"}) if r["name"] == "INTERNAL" else r for r in rows]
    assert "INTERNAL: openenv.errors has no class Boom" in _error_differences(renamed)


def test_the_bridge_sends_the_tables_ws_code() -> None:
    """openenv.json_protocol's WSErrorCode of each code (what the bridge's error frames carry)."""
    from openenv.json_protocol import frames

    table = {r["name"]: r["ws_code"] for r in _data("errors")["codes"] if r["ws_code"] is not None}
    assert {c.name: v for c, v in frames.WS_CODE.items() if c.name in table} == table
    assert set(table) | {r["name"] for r in _data("errors")["codes"]} == {c.name for c in frames.WS_CODE}


def test_retryable_follows_the_table() -> None:
    assert errors.Unavailable("draining").retryable and errors.ResourceExhausted("full").retryable
    assert errors.Aborted("gone").retryable
    assert not errors.InvalidArgument("bad").retryable and not errors.InvalidAction("no").retryable
    assert not errors.EnvError.from_code(99, "unknown").retryable


# --------------------------------------------------------------------------- feature matrix


def _oneof(message: Any, name: str) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.oneofs_by_name[name].fields}


def test_the_feature_matrix_covers_the_contract_once() -> None:
    feats = _data("features")
    rows = feats["features"]
    caps = {f.name for f in environment_pb2.Capabilities.DESCRIPTOR.fields}
    kinds = _oneof(environment_pb2.SessionRequest, "kind")
    rpcs = {m.name for m in environment_pb2.DESCRIPTOR.services_by_name["EnvironmentService"].methods}
    for key, contract in (("capabilities", caps), ("requests", kinds), ("rpcs", rpcs)):
        listed = [x for r in rows for x in r[key]]
        assert sorted(listed) == sorted(contract), (
            f"proto/tables/features.json {key} must list every one of the contract's once: "
            f"missing {sorted(contract - set(listed))}, unknown {sorted(set(listed) - contract)}"
        )
    rfcs = {p.name[:4] for p in (REPO_ROOT / "docs" / "rfcs").glob("[0-9][0-9][0-9][0-9]-*.md")}
    covered = {r["rfc"] for r in rows} | {t["rfc"] for t in feats["transports"]}
    assert rfcs <= covered, f"RFCs with no row in proto/tables/features.json: {sorted(rfcs - covered)}"
    assert openenv.PROTOCOL_VERSION == _contract.PROTOCOL_VERSION == _tools().protocol_version(_tools().load()), (
        "openenv.PROTOCOL_VERSION must be the newest minor of proto/tables/features.json"
    )


def _comment_of(proto: str, message: str, field: str) -> str:
    body = re.search(rf"\nmessage {message} \{{\n(.*?)\n\}}", proto, re.DOTALL)
    assert body, message
    lines = body.group(1).splitlines()
    at = next(i for i, line in enumerate(lines) if re.match(rf"\s+\S.*\b{field} = \d+;", line))
    comment = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("//"):
            break
        comment.insert(0, line.strip().removeprefix("//").strip())
    return " ".join(comment)


def test_harness_only_capabilities_are_marked_in_the_proto() -> None:
    proto = (REPO_ROOT / "proto" / "openenv" / "v1" / "environment.proto").read_text(encoding="utf-8")
    marked = {
        f.name
        for f in environment_pb2.Capabilities.DESCRIPTOR.fields
        if "Harness-only" in _comment_of(proto, "Capabilities", f.name)
    }
    assert marked == set(_data("features")["harness_only"]) == set(_contract.HARNESS_ONLY)
    assert "this file: " not in proto, "the proto states a protocol version that goes stale"


# --------------------------------------------------------------------------- declarations


def test_every_binding_declares_the_version_its_code_speaks() -> None:
    ct = _tools()
    tables = ct.load()
    decls = {d["binding"]: d for d in (ct.load_declaration(p, tables) for p in ct.declaration_paths())}
    assert {"python", "typescript"} <= set(decls)
    assert decls["python"]["protocol_version"] == openenv.PROTOCOL_VERSION
    grpc_ts = (REPO_ROOT / "typescript" / "src" / "grpc.ts").read_text(encoding="utf-8")
    ts_version = re.search(r'export const PROTOCOL_VERSION = "([0-9.]+)"', grpc_ts)
    assert ts_version and decls["typescript"]["protocol_version"] == ts_version.group(1), (
        "typescript/openenv-binding.json must state typescript/src/grpc.ts's PROTOCOL_VERSION"
    )
    with pytest.raises(ct.TableError, match=r"x.json: unknown features \['teleportation'\]"):
        ct.check_declaration(dict(decls["typescript"], features=["core", "teleportation"]), "x.json", tables)
    with pytest.raises(ct.TableError, match="every binding implements"):
        ct.check_declaration(dict(decls["typescript"], features=["tasks"]), "x.json", tables)
    with pytest.raises(ct.TableError, match="newer than the contract"):
        ct.check_declaration(dict(decls["typescript"], protocol_version="1.99"), "x.json", tables)


# --------------------------------------------------------------------------- the state machine


class Machine(openenv.Environment):
    """JSON actions ``{"op": ...}`` that drive the episode: go, terminate, truncate, hang (a step
    that never ends: only its timeout answers), invalid (InvalidAction), raise (INTERNAL)."""

    async def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> Any:
        return {"ready": True}

    async def step(self, action: Any) -> openenv.StepResult:
        op = action["op"]
        if op == "hang":
            await asyncio.sleep(3600)
        if op == "invalid":
            raise openenv.InvalidAction("not this one")
        if op == "raise":
            raise ValueError("boom")
        return openenv.StepResult({}, terminated=op == "terminate", truncated=op == "truncate")


class AutoMachine(Machine):
    auto_reset = True


TIMEOUT_S = 0.05
"""The step timeout of a hanging step (it never ends, so only the timeout can answer it)."""


async def _enter(env: openenv.EnvClient, status: str) -> None:
    if status == "NOT_STARTED":
        return
    await env.reset()
    if status in ("TERMINATED", "TRUNCATED"):
        await env.step({"op": {"TERMINATED": "terminate", "TRUNCATED": "truncate"}[status]})
    elif status == "ABORTED":
        with pytest.raises(errors.DeadlineExceeded):
            await env.step({"op": "hang"}, step_timeout=TIMEOUT_S)


_EVENT_ACTIONS: dict[str, list[dict[str, str]]] = {
    "step": [{"op": "go"}],
    "step_terminates": [{"op": "terminate"}],
    "step_truncates": [{"op": "truncate"}],
    "step_times_out": [{"op": "hang"}],
    "step_rejected": [{"op": "invalid"}, {"op": "raise"}],
    "step_not_running": [{"op": "go"}],
}


async def _apply(env: openenv.EnvClient, event: str, action: dict[str, str] | None) -> Any:
    """The event's answer: a StepResult / SessionState, or the EnvError it was refused with."""
    try:
        if event == "reset":
            return await env.reset()
        if event == "state":
            return await env.state()
        return await env.step(action, step_timeout=TIMEOUT_S if event == "step_times_out" else None)
    except errors.EnvError as e:
        return e


async def _transition_failures(transitions: Any) -> list[str]:
    failures = []
    async with InProcessServer(Machine) as plain, InProcessServer(AutoMachine) as auto:
        for t in transitions:
            servers = (
                [(False, plain), (True, auto)]
                if t.auto_reset is None
                else [(t.auto_reset, (plain, auto)[t.auto_reset])]
            )
            for auto_reset, server in servers:
                for source in t.sources:
                    for action in _EVENT_ACTIONS.get(t.event, [None]):
                        async with server.client() as env:
                            await _enter(env, source)
                            before = await env.state()
                            answer = await _apply(env, t.event, action)
                            after = await env.state()
                        where = f"{source} --{t.event}{'/' + action['op'] if action else ''} (auto_reset {auto_reset})"
                        failures += _judge(t, where, before, answer, after)
    return failures


def _judge(t: Any, where: str, before: Any, answer: Any, after: Any) -> list[str]:
    out = []
    allowed = t.answer.split("|")
    if isinstance(answer, errors.EnvError):
        if answer.code.name not in allowed or answer.fatal:
            out.append(f"{where}: answered {answer} (the table: {t.answer})")
    elif not set(allowed) & {"time_step", "reset_time_step", "state"}:
        out.append(f"{where}: answered {type(answer).__name__}, the table says {t.answer}")
    to = before.status.name if t.to == "same" else t.to
    if after.status.name != to:
        out.append(f"{where}: status {after.status.name}, the table says {to}")
    want = {"0": 0, "+1": before.step_count + 1, "same": before.step_count}[t.step_count]
    if after.step_count != want:
        out.append(f"{where}: step_count {after.step_count}, the table says {t.step_count} (was {before.step_count})")
    if t.step_count == "same" and after.episode_id != before.episode_id:
        out.append(f"{where}: the episode id changed")
    if t.step_count == "0" and (not after.episode_id or after.episode_id == before.episode_id):
        out.append(f"{where}: no new episode id")
    return out


@pytest.mark.anyio
async def test_the_runtime_follows_every_episode_transition() -> None:
    failures = await _transition_failures(_contract.EPISODE_TRANSITIONS)
    assert not failures, "\n".join(failures)


@pytest.mark.anyio
async def test_a_transition_the_runtime_does_not_make_fails() -> None:
    t = next(t for t in _contract.EPISODE_TRANSITIONS if t.event == "step_times_out")
    wrong = t._replace(to="RUNNING", answer="INTERNAL")
    failures = await _transition_failures([wrong])
    assert any("status ABORTED, the table says RUNNING" in f for f in failures), failures
    assert any("answered DEADLINE_EXCEEDED" in f for f in failures), failures


# --------------------------------------------------------------------------- request rules


class ToolMachine(Machine):
    """The machine with a tool, so that list_tools and call_tool are served."""

    @openenv.tool
    def ping(self) -> str:
        """Answers pong."""
        return "pong"


def _request(kind: str) -> environment_pb2.SessionRequest:
    """A valid request of ``kind`` ("": no kind set)."""
    if kind == "":
        return environment_pb2.SessionRequest()
    if kind == "handshake":
        return environment_pb2.SessionRequest(
            handshake=environment_pb2.HandshakeRequest(protocol_version=openenv.PROTOCOL_VERSION)
        )
    if kind == "step":
        req = environment_pb2.SessionRequest(step=environment_pb2.StepRequest())
        req.step.action.json.struct_value.fields["op"].string_value = "go"
        return req
    if kind == "list_tools":
        return environment_pb2.SessionRequest(list_tools=tool_pb2.ListToolsRequest())
    if kind == "call_tool":
        return environment_pb2.SessionRequest(call_tool=tool_pb2.CallToolRequest(name="ping"))
    messages = {"reset": environment_pb2.ResetRequest, "state": environment_pb2.StateRequest}
    return environment_pb2.SessionRequest(**{kind: messages.get(kind, environment_pb2.CloseRequest)()})


async def _rule_failures(rules: list[Mapping[str, Any]]) -> list[str]:
    """Where the server (over gRPC) and the request rules of the data differ."""
    out = []
    async with running(ToolMachine) as srv:
        for rule in rules:
            for kind in rule["requests"]:
                for side in ("awaiting_handshake", "open"):
                    want, where = rule[side], f"{kind or 'no kind'} in {side.upper()}"
                    if want.get("answer") == "episode":
                        continue  # the episode transitions say (tested above)
                    async with RawSession(target(srv)) as s:
                        if side == "open":
                            await s.open()
                        resp = await s.request(_request(kind))
                        got = resp.WhichOneof("kind")
                        if "error" in want:
                            code = errors.ErrorCode(resp.error.code).name if got == "error" else got
                            if (code, resp.error.fatal) != (want["error"], want["fatal"]):
                                out.append(f"{where}: answered {code} (fatal {resp.error.fatal}), the table {want}")
                                continue
                            if want["fatal"]:
                                ended = await s.ended()
                                if ended.code.name != "OK":
                                    out.append(f"{where}: after the fatal error the stream ended {ended.code.name}")
                            elif (await s.request(_request("state"))).WhichOneof("kind") != "state":
                                out.append(f"{where}: the session is not usable after the error")
                        elif got != (kind or None):
                            out.append(f"{where}: answered {got}, the table says its own kind")
    return out


@pytest.mark.anyio
async def test_the_server_follows_every_request_rule() -> None:
    rules = _data("sessions")["request_rules"]
    assert not await _rule_failures(rules)
    lenient = [dict(r, awaiting_handshake={"error": "FAILED_PRECONDITION", "fatal": False}) for r in rules[1:2]]
    assert await _rule_failures(lenient) == [
        "reset in AWAITING_HANDSHAKE: answered FAILED_PRECONDITION (fatal True), the table "
        "{'error': 'FAILED_PRECONDITION', 'fatal': False}"
    ]
