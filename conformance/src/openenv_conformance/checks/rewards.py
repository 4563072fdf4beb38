"""Level ``rewards``: rewards are finite and within the declared range; breakdowns add up."""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import payload_pb2, rubric_pb2
from openenv.values import from_struct, to_value
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, CheckWarning, Violation
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action
from openenv_conformance.transport import expect_ok

_SPEC = "docs/protocol.md"


def _episodes(ctx: Context, on_time_step: Callable[[str, pb.TimeStep], None]) -> None:
    """Search generated episodes, calling ``on_time_step(where, ts)`` on every time step."""
    valid = ctx.require_actions()

    def episode(seed: int, actions: list[Action]) -> None:
        s = ctx.session()
        ts = expect_ok(s.reset(seed=seed), "reset", "reset").time_step
        on_time_step(f"reset(seed={seed})", ts)
        for i, a in enumerate(actions):
            if ts.terminated or ts.truncated:
                break
            resp = s.step(a)
            if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "step":
                ts = resp.step.time_step
                on_time_step(f"step {i + 1} ({a!r})", ts)

    episode.__name__ = on_time_step.__name__
    ctx.search(episode, seed=st.integers(0, 2**32 - 1), actions=st.lists(valid, max_size=ctx.spec.budget))


@check("rewards.finite", "Every reward is a finite number (no NaN, no infinity)", f"{_SPEC} §7")
def finite(ctx: Context) -> None:
    def rewards_finite(where: str, ts: pb.TimeStep) -> None:
        if ts.HasField("reward") and not math.isfinite(ts.reward):
            raise Violation(f"{where}: reward is {ts.reward}")

    _episodes(ctx, rewards_finite)


@check(
    "rewards.range", "Every reward lies within the declared [reward_min, reward_max] (inclusive)", f"{_SPEC} §1.3, §7"
)
def reward_range(ctx: Context) -> None:
    lo, hi = ctx.spec.reward_range
    if lo is None and hi is None:
        raise CheckSkipped("the environment declares no reward range")

    def rewards_in_range(where: str, ts: pb.TimeStep) -> None:
        if not ts.HasField("reward") or math.isnan(ts.reward):
            return
        r = ts.reward
        if (lo is not None and r < lo) or (hi is not None and r > hi):
            raise Violation(f"{where}: reward {r} outside the declared range [{lo}, {hi}]")

    _episodes(ctx, rewards_in_range)


def _close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=max(tol, 1e-9))


def _check_node(score: rubric_pb2.RubricScore, spec: rubric_pb2.RubricSpec | None, tol: float, path: str) -> None:
    where = path or score.name
    if not math.isfinite(score.score):
        raise Violation(f"breakdown node {where!r}: score {score.score}")
    if spec is None:
        return
    if score.name != spec.name:
        raise Violation(f"breakdown node {where!r} is named {score.name!r}; the rubric's node is {spec.name!r}")
    if spec.HasField("minimum") and score.score < spec.minimum - tol:
        raise Violation(f"breakdown node {where!r}: score {score.score} below the declared minimum {spec.minimum}")
    if spec.HasField("maximum") and score.score > spec.maximum + tol:
        raise Violation(f"breakdown node {where!r}: score {score.score} above the declared maximum {spec.maximum}")
    by_name = {c.name: (i, c) for i, c in enumerate(spec.children)}
    last = -1
    for child in score.children:
        if child.name not in by_name:
            raise Violation(
                f"breakdown node {where!r} has a child {child.name!r} the rubric does not declare "
                f"(declared: {list(by_name)})"
            )
        i, cspec = by_name[child.name]
        if i <= last:
            raise Violation(f"breakdown node {where!r}: children are not in the rubric's order")
        last = i
        if not _close(child.weight, cspec.weight, 1e-12):
            raise Violation(
                f"breakdown node {where}/{child.name}: weight {child.weight}, the rubric says {cspec.weight}"
            )
        _check_node(child, cspec, tol, f"{where}/{child.name}")
    if spec.kind == "weighted_sum" and spec.children and len(score.children) == len(spec.children):
        total = sum(c.weight * c.score for c in score.children)
        if not _close(total, score.score, tol):
            terms = " + ".join(f"{c.weight:g}*{c.score:g}" for c in score.children)
            raise Violation(f"breakdown node {where!r} (weighted_sum): score {score.score} but {terms} = {total}")


@check(
    "rewards.breakdown",
    "A reward breakdown appears only with a reward, its root score equals the reward, it mirrors the declared "
    "rubric (names, order, weights, bounds), and weighted_sum nodes add up",
    f"{_SPEC} §7; proto RubricSpec, RubricScore",
)
def breakdown(ctx: Context) -> str | None:
    rubric = ctx.info.rubric if ctx.info.HasField("rubric") and ctx.info.rubric.name else None
    tol = ctx.spec.tolerance
    seen = [0]

    def breakdown_adds_up(where: str, ts: pb.TimeStep) -> None:
        if not ts.HasField("reward_breakdown"):
            return
        seen[0] += 1
        bd = ts.reward_breakdown
        if not ts.HasField("reward"):
            raise Violation(f"{where}: a reward_breakdown without a reward")
        if not _close(bd.score, ts.reward, tol):
            raise Violation(f"{where}: breakdown root score {bd.score} != reward {ts.reward}")
        _check_node(bd, rubric, tol, "")

    _episodes(ctx, breakdown_adds_up)
    if not seen[0]:
        if rubric is None:
            raise CheckSkipped("the environment declares no rubric and sent no reward breakdown")
        params = from_struct(rubric.params) if rubric.HasField("params") else {}
        return (
            f"rubric {rubric.name!r} ({rubric.kind}{', ' + str(params) if params else ''}) declared; "
            "no generated step carried a breakdown"
        )
    return None


def _trivial_actions(ctx: Context) -> list[tuple[str, Action]]:
    """Actions that take no skill: the first accepted action, and (JSON actions) that action with
    every string field emptied, when it is still a valid action."""
    first = ctx.accepted_actions(1)[0]
    out = [(f"{first!r}, repeated", first)]
    value = ctx.spec.action.decode(first.payload) if ctx.spec.action.kind_name == "json" else None
    if isinstance(value, dict) and any(isinstance(v, str) and v for v in value.values()):
        emptied = {k: "" if isinstance(v, str) else v for k, v in value.items()}
        p = payload_pb2.Payload()
        to_value(emptied, p.json)
        if not ctx.spec.action.problems(p):
            out.append((f"empty strings {emptied!r}, repeated", Action(p, f"empty strings {emptied!r}")))
    return out


@check(
    "rewards.trivial_max",
    "Reward sanity (in the spirit of OpenEnv RFC 008): with a declared reward_range, the maximum reward is not "
    "reached by trivial actions (the first example repeated, empty strings); a warning, a failure with "
    "--strict-rewards",
    f"{_SPEC} §1.3 (reward_min, reward_max), §7",
)
def trivial_max(ctx: Context) -> str | None:
    caps = ctx.spec.caps
    if not caps.HasField("reward_max"):
        raise CheckSkipped("the environment declares no reward_range (Capabilities.reward_max unset)")
    top = caps.reward_max
    ctx.require_actions()
    base = ctx.seed_for("trivial")
    for label, action in _trivial_actions(ctx):
        for i in range(3):
            seed = (base + 104729 * i) % 2**32
            s = ctx.session()
            ts = expect_ok(s.reset(seed=seed), "reset", "reset").time_step
            for n in range(ctx.spec.budget):
                if ts.terminated or ts.truncated:
                    break
                resp = s.step(action)
                if not (isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "step"):
                    break
                ts = resp.step.time_step
                if ts.HasField("reward") and ts.reward >= top:
                    msg = (
                        f"the maximum reward {top:g} (reward_max) was reached by a trivial policy: {label}, "
                        f"at step {n + 1} of an episode with seed {seed}"
                    )
                    if ctx.options.strict_rewards:
                        raise Violation(msg)
                    raise CheckWarning(msg)
            s.shutdown()
    return None
