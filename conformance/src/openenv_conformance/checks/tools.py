"""Level ``tools``: the tool list, tool calls with valid, invalid and unknown names/arguments."""

from __future__ import annotations

import jsonschema
from google.protobuf import json_format

from openenv.v1 import environment_pb2 as pb
from openenv.values import from_struct
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.model import EpisodeModel
from openenv_conformance.registry import check
from openenv_conformance.spec import grading_declaration
from openenv_conformance.strategies import CALL_TOOL, pack
from openenv_conformance.transport import EPISODE_FIELDS, SessionLike, describe, expect_error, expect_ok

_SPEC = "docs/protocol.md"
_RESERVED = {"reset", "step", "state", "close"}


def _require_tools(ctx: Context) -> None:
    if not ctx.spec.caps.tools:
        raise CheckSkipped("the environment declares no tools (Capabilities.tools = false)")


def _listed(s: SessionLike, what: str) -> list:
    return list(expect_ok(s.list_tools(), "list_tools", what).tools)


def _state_if_sim(ctx: Context, s: SessionLike, model: EpisodeModel, what: str) -> None:
    if ctx.spec.sim:
        model.on_state(s.state(), what)


@check(
    "tools.list_stable",
    "list_tools gives the same tools in the same order on every call, in every episode status and in every "
    "session; names are unique and not reserved; input schemas are valid JSON Schemas",
    f"{_SPEC} §6; proto ListToolsResponse",
)
def list_stable(ctx: Context) -> str | None:
    _require_tools(ctx)
    calls = ctx.actions.tool_calls()  # before opening the session: capacity may be 1
    s = ctx.session()
    first = _listed(s, "list_tools")
    lists = [("on a second call", _listed(s, "list_tools"))]
    if ctx.spec.sim:
        expect_ok(s.reset(), "reset", "reset")
        lists.append(("after reset", _listed(s, "list_tools after reset")))
    if first:
        call = ctx.sample(calls, 1) if calls is not None else []
        for name, args in call:
            s.call_tool(name, args)
        lists.append(("after a tool call", _listed(s, "list_tools after a tool call")))
    # One session at a time: capacity 1 is a valid declaration.
    lists.append(("in another session", _listed(ctx.next_session(s), "list_tools in another session")))
    for when, other in lists:
        if other != first:
            a, b = [t.name for t in first], [t.name for t in other]
            detail = f"names {a} then {b}" if a != b else "same names, different descriptors"
            raise Violation(f"the tool list changed {when}: {detail}")
    names = [t.name for t in first]
    if len(set(names)) != len(names):
        raise Violation(f"duplicate tool names: {names}")
    if _RESERVED & set(names):
        raise Violation(f"reserved tool names used: {sorted(_RESERVED & set(names))}")
    for t in first:
        schema = from_struct(t.input_schema)
        try:
            jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
        except jsonschema.SchemaError as e:
            raise Violation(f"tool {t.name!r}: input_schema is not a valid JSON Schema: {e.message}") from None
    if not names:
        return "the environment declares tools but lists none"
    return None


@check(
    "tools.valid_arguments",
    "A call with arguments valid under the tool's input_schema returns a CallToolResponse for that tool (a failing "
    "tool is a result with is_error); a side call changes no episode state; a grading tool's side call in a "
    "strict session is FAILED_PRECONDITION, not fatal",
    f"{_SPEC} §6; §7.1 (a grading tool called as a side call, strict feedback)",
    requires=(EPISODE_FIELDS,),
)
def valid_arguments(ctx: Context) -> None:
    _require_tools(ctx)
    calls = ctx.actions.tool_calls()
    if calls is None:
        raise CheckSkipped("the environment lists no tool whose arguments can be generated")
    out_schemas = {t.name: from_struct(t.output_schema) for t in ctx.tools if t.HasField("output_schema")}
    # RFC 0015: in a session with strict feedback (the default of a grading environment) grading
    # happens once per episode, as a step: a grading tool's side call is refused once its
    # arguments are valid. Any other tool (and a grading tool where feedback is rich) answers.
    refused = {t.name for t in ctx.tools if grading_declaration(t) is not None} if ctx.spec.strict else set()

    def call(tool: tuple[str, dict]) -> None:
        name, args = tool
        s = ctx.session()
        model = EpisodeModel(ctx.spec)
        if ctx.spec.sim:
            model.on_reset(s.reset())
        resp = s.call_tool(name, args)
        if name in refused:
            expect_error(
                resp, "FAILED_PRECONDITION", f"call_tool {name}({args}): a grading tool's side call", fatal=False
            )
            _state_if_sim(ctx, s, model, f"state after the refused side call of the grading tool {name}")
            return
        r = expect_ok(resp, "call_tool", f"call_tool {name}({args})")
        if r.name != name:
            raise Violation(f"call_tool {name}: CallToolResponse names {r.name!r}")
        if not r.HasField("result"):
            raise Violation(f"call_tool {name}({args}): CallToolResponse has no result")
        schema = out_schemas.get(name)
        if schema and not r.result.is_error and r.result.HasField("structured_content"):
            errs = list(jsonschema.Draft202012Validator(schema).iter_errors(from_struct(r.result.structured_content)))
            if errs:
                raise Violation(
                    f"call_tool {name}({args}): structured_content violates output_schema: {errs[0].message}"
                )
        _state_if_sim(ctx, s, model, f"state after call_tool {name}")

    ctx.search(call, tool=calls)


@check(
    "tools.invalid_arguments",
    "A call whose arguments violate the tool's input_schema (missing, extra or wrongly typed) is INVALID_ARGUMENT, "
    "not fatal, and changes nothing",
    f"{_SPEC} §6; error table: INVALID_ARGUMENT (tool arguments that violate input_schema)",
    requires=(EPISODE_FIELDS,),
)
def invalid_arguments(ctx: Context) -> None:
    _require_tools(ctx)
    bad = ctx.actions.invalid_tool_calls()
    if bad is None:
        raise CheckSkipped("no listed tool has an input_schema that any argument object violates")

    def refused(call: tuple[str, str, dict]) -> None:
        name, broken, args = call
        s = ctx.session()
        model = EpisodeModel(ctx.spec)
        if ctx.spec.sim:
            model.on_reset(s.reset())
        expect_error(
            s.call_tool(name, args), "INVALID_ARGUMENT", f"call_tool {name}({args}) with {broken}", fatal=False
        )
        _state_if_sim(ctx, s, model, f"state after the refused call of {name}")
        expect_ok(s.list_tools(), "list_tools", "list_tools after a refused tool call")

    ctx.search(refused, call=bad)


@check(
    "tools.unknown_tool",
    "Calling a tool that is not listed (including reserved names) is NOT_FOUND, not fatal; as a tool-call step "
    "it is not counted",
    f"{_SPEC} §6; error table: NOT_FOUND",
    requires=(EPISODE_FIELDS,),
)
def unknown_tool(ctx: Context) -> None:
    _require_tools(ctx)
    s = ctx.session()
    model = EpisodeModel(ctx.spec)
    if ctx.spec.sim:
        model.on_reset(s.reset())
    for name in ("conformance_no_such_tool", "reset", "step", "Echo_Message_NOPE"):
        expect_error(s.call_tool(name, {}), "NOT_FOUND", f"call_tool {name!r}", fatal=False)
        _state_if_sim(ctx, s, model, f"state after calling the unknown tool {name!r}")
    if ctx.spec.sim and ctx.spec.action.message_type == CALL_TOOL and ctx.spec.action.cls is not None:
        msg = json_format.ParseDict({"name": "conformance_no_such_tool"}, ctx.spec.action.cls())
        resp = s.step(pack(msg, CALL_TOOL))
        expect_error(resp, "NOT_FOUND", "a tool-call step naming an unknown tool", fatal=False)
        model.on_state(s.state(), "state after a tool-call step naming an unknown tool")


@check(
    "tools.unimplemented",
    "Without the tools capability, list_tools and call_tool answer UNIMPLEMENTED (not fatal)",
    f"{_SPEC} §3.2, §6; error table: UNIMPLEMENTED",
)
def unimplemented(ctx: Context) -> None:
    if ctx.spec.caps.tools:
        raise CheckSkipped("the environment declares tools")
    s = ctx.session()
    expect_error(s.list_tools(), "UNIMPLEMENTED", "list_tools without tools", fatal=False)
    expect_error(s.call_tool("anything", {}), "UNIMPLEMENTED", "call_tool without tools", fatal=False)
    resp = s.state() if ctx.spec.sim else s.list_tools()
    if not isinstance(resp, pb.SessionResponse):
        raise Violation(f"the session ended after UNIMPLEMENTED: {describe(resp)}")
