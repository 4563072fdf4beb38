"""Level ``schema``: declared types, observations, valid and invalid actions."""

from __future__ import annotations

from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import multiagent_pb2
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.model import EpisodeModel
from openenv_conformance.registry import check
from openenv_conformance.strategies import CALL_TOOL, Action
from openenv_conformance.transport import EPISODE_FIELDS, GRPC, SessionLike, describe, expect_error, expect_ok

_SPEC = "docs/protocol.md"


def _invalid_or_skip(ctx: Context) -> st.SearchStrategy[Action]:
    bad = ctx.actions.invalid()
    if bad is None:
        if not ctx.spec.action.declared:
            raise CheckSkipped("the action type is not declared (PAYLOAD_KIND_UNSPECIFIED): every payload is valid")
        raise CheckSkipped(
            "no JSON value breaks the declared action type (it declares no JSON Schema constraint), "
            "so no invalid action can be sent over OpenEnv's JSON protocol"
        )
    return bad


@check(
    "schema.descriptors",
    "The advertised FileDescriptorSet resolves every declared message type, every json_schema is a valid JSON "
    "Schema, and every declared example conforms to its type",
    f"{_SPEC} §1.2, §2",
)
def descriptors(ctx: Context) -> None:
    spec = ctx.spec
    problems: list[str] = []
    if spec.pool_error:
        problems.append(f"descriptors: {spec.pool_error}")
    for t in (spec.action, spec.observation, spec.state):
        if t.class_error:
            problems.append(t.class_error)
        if t.schema_error:
            problems.append(t.schema_error)
        for i, ex in enumerate(t.examples):
            problems += [f"{t.role} example[{i}]: {p}" for p in t.problems(ex)]
    if problems:
        raise Violation("; ".join(problems))


@check(
    "schema.observations",
    "Every observation (after reset and after each step) and every state payload conforms to its declared "
    "type: payload kind, Any type, decodable bytes, JSON Schema, tensor dtype/shape/bounds",
    f"{_SPEC} §2; proto TimeStep.observation, StateResponse.state",
)
def observations(ctx: Context) -> None:
    valid = ctx.require_actions()
    obs_t, state_t = ctx.spec.observation, ctx.spec.state
    if not obs_t.declared and not state_t.declared:
        raise CheckSkipped("neither an observation nor a state type is declared")

    def state_conforms(s: SessionLike, what: str) -> None:
        st_ = expect_ok(s.state(), "state", what)
        for p in state_t.problems(st_.state, allow_empty=True):
            raise Violation(f"{what}: {p}")

    def conform(seed: int, actions: list[Action]) -> None:
        s = ctx.session()
        state_conforms(s, "state before any reset")
        ts = expect_ok(s.reset(seed=seed), "reset", "reset").time_step
        for p in obs_t.problems(ts.observation):
            raise Violation(f"reset(seed={seed}): {p}")
        state_conforms(s, "state after the reset")
        # The state is validated in every episode status (RFC 0007), not once per episode.
        for i, a in enumerate(actions):
            if ts.terminated or ts.truncated:
                break
            resp = s.step(a)
            if not (isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "step"):
                state_conforms(s, f"state after the refused step {i + 1} ({a!r})")
                continue
            ts = resp.step.time_step
            for p in obs_t.problems(ts.observation):
                raise Violation(f"step {i + 1} ({a!r}): {p}")
            state_conforms(s, f"state after step {i + 1} ({a!r})")
        state_conforms(s, "state after the episode")

    ctx.search(conform, seed=st.integers(0, 2**32 - 1), actions=st.lists(valid, max_size=ctx.spec.budget))


@check(
    "schema.valid_actions",
    "Declared examples are accepted in a fresh episode; generated valid actions are answered with a time step "
    "(or INVALID_ARGUMENT when the environment rejects the move), never another error, and never end the session",
    f"{_SPEC} §2, §3.5; error table: INVALID_ARGUMENT (openenv.InvalidAction)",
    requires=(EPISODE_FIELDS,),
)
def valid_actions(ctx: Context) -> None:
    valid = ctx.require_actions()
    joint = ctx.spec.caps.multi_agent and ctx.info.multi_agent.mode == multiagent_pb2.TURN_MODE_SIMULTANEOUS
    if joint and GRPC not in ctx.features:
        raise CheckSkipped("a simultaneous multi-agent world steps with joint actions: OpenEnv's frames carry none")
    for a in ctx.actions.examples:
        s = ctx.session()
        first = expect_ok(s.reset(), "reset", "reset").time_step
        if joint:  # RFC 0012: an example is one agent's action; every agent to act plays it
            st = pb.StepRequest()
            for agent in first.to_act:
                st.actions[agent].CopyFrom(a.payload)
            expect_ok(s.exchange(s.request(step=st)), "step", f"declared {a!r}, played by every agent to act")
        else:
            expect_ok(s.step(a), "step", f"declared {a!r}")
        s.shutdown()
    strict = ctx.spec.action.message_type == CALL_TOOL  # tool calls from input schemas must run

    def accepted(action: Action) -> None:
        s = ctx.session()
        model = EpisodeModel(ctx.spec)
        model.on_reset(s.reset())
        resp = s.step(action)
        if strict:
            expect_ok(resp, "step", f"step {action!r} (arguments valid under the tool's input_schema)")
            return
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error":
            expect_error(resp, "INVALID_ARGUMENT", f"step {action!r}", fatal=False)
            model.on_state(s.state(), f"state after the rejected {action!r}")
        else:
            model.on_step(resp, f"step {action!r}")

    ctx.search(accepted, action=valid)


@check(
    "schema.invalid_actions",
    "Invalid actions (unset payload, wrong payload kind, Any of the wrong type, undecodable bytes, missing, extra "
    "or wrongly typed fields, bad tensors, tool arguments violating input_schema) are INVALID_ARGUMENT, not "
    "fatal, change nothing, and the session stays usable",
    f"{_SPEC} §2, §3.5; error table: INVALID_ARGUMENT",
    requires=(EPISODE_FIELDS,),
)
def invalid_actions(ctx: Context) -> None:
    ctx.require_sim()
    bad = _invalid_or_skip(ctx)
    good = ctx.accepted_actions(1) if ctx.actions.valid() is not None else []

    def refused(action: Action) -> None:
        s = ctx.session()
        model = EpisodeModel(ctx.spec)
        model.on_reset(s.reset())
        resp = s.step(action)
        expect_error(resp, "INVALID_ARGUMENT", f"step {action!r}", fatal=False)
        model.on_state(s.state(), f"state after the invalid {action!r}")
        if good:
            model.on_step(s.step(good[0]), f"a valid step {good[0]!r} after the invalid one")
            if model.step_count != 1:
                raise Violation(f"a valid step {good[0]!r} after the invalid {action!r} was not accepted")

    ctx.search(refused, action=bad)


@check(
    "schema.error_precedence",
    "An undecodable or wrongly typed action is INVALID_ARGUMENT even before reset: a malformed request is "
    "reported before the episode status",
    f"{_SPEC} §3.5 (which rule is reported first)",
)
def error_precedence(ctx: Context) -> None:
    ctx.require_sim()
    bad = _invalid_or_skip(ctx)
    s = ctx.session()
    for a in ctx.sample(bad, 8):
        if a.label.startswith("tool arguments"):
            continue  # argument validation happens when the tool runs; see tools.invalid_arguments
        resp = s.step(a)
        if not (isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error"):
            raise Violation(f"step {a!r} before reset: expected INVALID_ARGUMENT, got {describe(resp)}")
        expect_error(resp, "INVALID_ARGUMENT", f"step {a!r} before reset", fatal=False)
