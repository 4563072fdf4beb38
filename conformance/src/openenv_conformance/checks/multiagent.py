"""Level ``multiagent``: multi-agent worlds (RFC 0012, docs/multiagent.md).

Skipped unless the server advertises ``Capabilities.multi_agent``; gRPC only (OpenEnv's JSON
frames carry a self-play session's summary, not per-agent views, joins or joint actions). The
checks play whole episodes of a world with candidate actions (the declared examples, then
generated ones); an action the environment refuses is not a step, so the next candidate is tried.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import multiagent_pb2
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, Violation
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action
from openenv_conformance.transport import GRPC, PROTOCOL_VERSION, SessionLike, describe, expect_error, expect_ok

_SPEC = "RFC 0012 (docs/rfcs/0012-multi-agent.md), docs/multiagent.md"
_WHY = "gRPC only: OpenEnv's JSON frames carry no per-agent views, joins or joint actions (RFC 0012, Transports)"
_SEEDS = (11, 12)
_MAX_WORLD_STEPS = 64  # a world that has not ended by then is given up (the check says so)


def _spec(ctx: Context) -> multiagent_pb2.MultiAgentSpec:
    if not ctx.spec.caps.multi_agent:
        raise CheckSkipped("the environment has one agent (Capabilities.multi_agent is not set)")
    ctx.require_sim()
    return ctx.info.multi_agent


def _agents(spec: multiagent_pb2.MultiAgentSpec) -> list[str]:
    return [a.id for a in spec.agents]


def _turn_based(spec: multiagent_pb2.MultiAgentSpec) -> bool:
    return spec.mode != multiagent_pb2.TURN_MODE_SIMULTANEOUS


def _candidates(ctx: Context) -> list[Action]:
    valid = ctx.require_actions()
    return list(ctx.actions.examples) + ctx.sample(valid, 24)


def _open(ctx: Context, join_token: str = "", agent_ids: list[str] | tuple[str, ...] = ()) -> tuple[SessionLike, Any]:
    """A session in a world: (session, its handshake answer, a SessionResponse or StreamEnd)."""
    s = ctx.wire.session()
    hs = pb.HandshakeRequest(protocol_version=PROTOCOL_VERSION, client_name="openenv-certify")
    if join_token or agent_ids:
        hs.world.join_token = join_token
        hs.world.agent_ids.extend(agent_ids)
    resp = s.exchange(s.request(handshake=hs))
    if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "handshake":
        s.opened = True
        s.info = resp.handshake.info
        s.session_id = resp.handshake.session_id
    return s, resp


def _world(ctx: Context, join_token: str = "", agent_ids: list[str] | tuple[str, ...] = ()) -> tuple[SessionLike, Any]:
    """A session in a world that must open: (session, its WorldInfo)."""
    s, resp = _open(ctx, join_token, agent_ids)
    what = f"a handshake {'joining' if join_token else 'creating'} a world for agents {list(agent_ids) or 'any'}"
    hs = expect_ok(resp, "handshake", what)
    if not hs.HasField("world"):
        raise Violation(f"{what}: the answer carries no WorldInfo (HandshakeResponse.world)")
    return s, hs.world


def _step(s: SessionLike, action: Action, agent_id: str = "") -> Any:
    return s.exchange(s.request(step=pb.StepRequest(action=action.payload, agent_id=agent_id)))


def _observe(s: SessionLike, wait: bool = False, timeout_s: float | None = None) -> Any:
    o = pb.ObserveRequest(wait=wait)
    if timeout_s is not None:
        o.timeout.FromNanoseconds(int(timeout_s * 1e9))
    return s.exchange(s.request(observe=o))


def _kind(resp: Any) -> str | None:
    return resp.WhichOneof("kind") if isinstance(resp, pb.SessionResponse) else None


def _views(ts: pb.TimeStep) -> dict[str, bytes]:
    return {a: part.observation.SerializeToString(deterministic=True) for a, part in ts.agents.items()}


@dataclasses.dataclass
class _Episode:
    """One played episode: the world's time steps (self-play) and the actions that made them."""

    steps: list[pb.TimeStep]
    actions: list[dict[str, Action]]
    ended: bool


def _play_self(ctx: Context, s: SessionLike, seed: int, cands: list[Action], turn_based: bool) -> _Episode:
    """Play one episode in a self-play session: each world step, the first candidate(s) accepted."""
    ts = expect_ok(s.reset(seed=seed), "reset", f"reset(seed={seed}) of a self-play session").time_step
    steps, actions = [ts], []
    for _ in range(_MAX_WORLD_STEPS):
        if ts.terminated or ts.truncated or not ts.to_act:
            break
        chosen: dict[str, Action] = {}
        for a in cands:
            if turn_based:
                resp = _step(s, a, ts.to_act[0])
                chosen = {ts.to_act[0]: a}
            else:
                joint = {agent: a for agent in ts.to_act}
                st = pb.StepRequest()
                for agent, act in joint.items():
                    st.actions[agent].CopyFrom(act.payload)
                resp = s.exchange(s.request(step=st))
                chosen = joint
            if _kind(resp) == "step":
                ts = resp.step.time_step
                break
            if _kind(resp) != "error" or resp.error.fatal:
                raise Violation(f"a step of a self-play session with {a!r} answered {describe(resp)}")
        else:
            break  # no candidate was accepted: the episode cannot go on
        steps.append(ts)
        actions.append(chosen)
    return _Episode(steps, actions, ts.terminated or ts.truncated)


def _seen_by(mine: dict[int, set[str]]) -> Any:
    def seen_by(s: SessionLike, ts: pb.TimeStep, what: str) -> None:
        extra = set(ts.agents) - mine[id(s)]
        if extra:
            raise Violation(f"{what}: a session acting for {sorted(mine[id(s)])} received the views of {sorted(extra)}")

    return seen_by


@check(
    "multiagent.turn_order",
    "In a turn-based world at most one agent is to act, never one that is done, and nobody else's step is "
    "accepted: a step for another agent is FAILED_PRECONDITION and changes nothing",
    f"{_SPEC}: Semantics, Turn-based",
    requires=(GRPC,),
    why=_WHY,
)
def turn_order(ctx: Context) -> str:
    spec = _spec(ctx)
    if not _turn_based(spec):
        raise CheckSkipped("a simultaneous world: every agent to act acts in the same world step")
    agents, cands = _agents(spec), _candidates(ctx)
    refused = 0
    with ctx.session() as s:
        for seed in _SEEDS:
            ts = expect_ok(s.reset(seed=seed), "reset", f"reset(seed={seed})").time_step
            for n in range(_MAX_WORLD_STEPS + 1):
                where = f"episode seed {seed}, world step {ts.step_count}"
                done = ts.terminated or ts.truncated
                if done:
                    if ts.to_act:
                        raise Violation(f"{where}: the world's episode is over but to_act names {list(ts.to_act)}")
                    break
                if len(ts.to_act) != 1:
                    raise Violation(
                        f"{where}: a turn-based world names {len(ts.to_act)} agents to act ({list(ts.to_act)}); "
                        "exactly one must act while the episode runs"
                    )
                actor = ts.to_act[0]
                if ts.agents[actor].terminated or ts.agents[actor].truncated:
                    raise Violation(f"{where}: {actor!r} is done but named to act")
                before = _views(ts)
                for other in agents:
                    if other == actor:
                        continue
                    resp = _step(s, cands[0], other)
                    what = f"{where}: a step for {other!r} while {actor!r} is to act"
                    expect_error(resp, "FAILED_PRECONDITION", what, fatal=False)
                    refused += 1
                    now = expect_ok(_observe(s), "observe", f"{where}: observe after the refused step").time_step
                    if now.step_count != ts.step_count or list(now.to_act) != [actor] or _views(now) != before:
                        raise Violation(f"{where}: a refused step for {other!r} changed the world")
                for a in cands:
                    resp = _step(s, a, actor)
                    if _kind(resp) == "step":
                        ts = resp.step.time_step
                        break
                else:
                    break
                if n == _MAX_WORLD_STEPS:
                    break
    return f"{refused} out-of-turn steps refused"


@check(
    "multiagent.views_private",
    "In a world shared by two sessions, each receives only the views of its own agents (time steps, observe) "
    "and no world state; each view equals the one a self-play session gets in the same seeded episode; with "
    "hidden_information, agents' views differ",
    f"{_SPEC}: Semantics, Views; Worlds and seats",
    requires=(GRPC,),
    why=_WHY,
)
def views_private(ctx: Context) -> str:
    spec = _spec(ctx)
    agents = _agents(spec)
    if len(agents) < 2 or not spec.joinable:
        raise CheckSkipped("one agent, or worlds are not joinable: no other session to hide anything from")
    cands, turn_based = _candidates(ctx), _turn_based(spec)
    deterministic = ctx.spec.caps.deterministic
    differed = False
    compared = 0
    for seed in _SEEDS:
        with ctx.session() as solo:
            ref = _play_self(ctx, solo, seed, cands, turn_based)
        for ts in ref.steps:
            seen = set(_views(ts).values())
            differed = differed or len(seen) > 1
        a, world = _world(ctx, agent_ids=[agents[0]])
        with a:
            b, joined = _world(ctx, join_token=world.join_token)
            with b:
                seats = {agents[0]: a}
                for agent in joined.agent_ids:
                    seats[agent] = b
                mine = {id(a): {agents[0]}, id(b): set(joined.agent_ids)}
                seen_by = _seen_by(mine)

                ta = expect_ok(a.reset(seed=seed), "reset", f"reset(seed={seed}) by the owner").time_step
                tb = expect_ok(b.reset(), "reset", "reset by the joined session").time_step
                seen_by(a, ta, "the owner's reset")
                seen_by(b, tb, "the joined session's reset")
                for s, who in ((a, "the owner"), (b, "the joined session")):
                    st = expect_ok(s.state(), "state", f"state of {who}")
                    if st.HasField("state"):
                        raise Violation(f"state of {who}, which acts for some agents only, carries the world's state")
                for k, joint in enumerate(ref.actions):
                    if turn_based:
                        ((agent, act),) = joint.items()
                        resp = _step(seats[agent], act, agent)
                        what = f"world step {k + 1} ({agent}: {act!r}) in the shared world"
                        ts = expect_ok(resp, "step", what).time_step
                        seen_by(seats[agent], ts, f"world step {k + 1}")
                    else:
                        parts: dict[int, pb.StepRequest] = {}
                        for agent, act in joint.items():
                            parts.setdefault(id(seats[agent]), pb.StepRequest()).actions[agent].CopyFrom(act.payload)
                        sent = []
                        for s in (a, b):
                            if id(s) in parts:
                                req = s.request(step=parts[id(s)])
                                s.send(req)
                                sent.append((s, req))
                        for s, _req in sent:
                            what = f"world step {k + 1} (joint) in the shared world"
                            ts = expect_ok(s.recv(), "step", what).time_step
                            seen_by(s, ts, f"world step {k + 1}")
                    for s in (a, b):
                        ts = expect_ok(_observe(s), "observe", f"observe after world step {k + 1}").time_step
                        seen_by(s, ts, f"observe after world step {k + 1}")
                        if deterministic and k + 1 < len(ref.steps):
                            want = _views(ref.steps[k + 1])
                            for agent, view in _views(ts).items():
                                compared += 1
                                if view != want.get(agent):
                                    raise Violation(
                                        f"episode seed {seed}, world step {k + 1}: {agent!r}'s view in a shared world "
                                        "differs from its view in a self-play session of the same seeded episode "
                                        "(a view that depends on who else is connected, or another agent's view)"
                                    )
    if spec.hidden_information and not differed:
        raise Violation(
            "the environment declares hidden_information, yet at every world step of the played episodes every agent "
            "saw exactly what every other agent saw: each agent's private information reaches the others"
        )
    return f"{compared} views compared with self-play" if compared else "views filtered per session"


@check(
    "multiagent.reward_sum",
    "When MultiAgentSpec.reward_sum is declared, each episode's per-agent returns sum over the agents to it",
    f"{_SPEC}: Semantics, Rewards",
    requires=(GRPC,),
    why=_WHY,
)
def reward_sum(ctx: Context) -> str:
    spec = _spec(ctx)
    if not spec.HasField("reward_sum"):
        raise CheckSkipped("the environment declares no reward_sum")
    cands, turn_based = _candidates(ctx), _turn_based(spec)
    tol = max(ctx.spec.tolerance, 1e-9)
    ended = 0
    with ctx.session() as s:
        for seed in _SEEDS:
            ep = _play_self(ctx, s, seed, cands, turn_based)
            if not ep.ended:
                continue
            ended += 1
            returns = dict.fromkeys(_agents(spec), 0.0)
            for ts in ep.steps:
                for agent, part in ts.agents.items():
                    if part.HasField("reward"):
                        returns[agent] += part.reward
            total = sum(returns.values())
            if not math.isfinite(total) or abs(total - spec.reward_sum) > tol:
                raise Violation(
                    f"episode seed {seed}: the agents' returns {returns} sum to {total:g}, "
                    f"not the declared reward_sum {spec.reward_sum:g}"
                )
    if not ended:
        raise CheckNotExercised(f"no episode of seeds {list(_SEEDS)} ended within {_MAX_WORLD_STEPS} world steps")
    return f"{ended} episodes summed to {spec.reward_sum:g}"


@check(
    "multiagent.joins",
    "Worlds are created and joined by token: each agent has at most one session, refusals (unknown token, a "
    "taken agent, none left) are fatal with their codes, a leaving session frees its agents, and the world "
    "outlives its owner",
    f"{_SPEC}: Semantics, Worlds and seats; Leaving",
    requires=(GRPC,),
    why=_WHY,
)
def joins(ctx: Context) -> str:
    spec = _spec(ctx)
    agents = _agents(spec)
    if len(agents) < 2 or not spec.joinable:
        raise CheckSkipped("one agent, or worlds are not joinable")
    first, rest = agents[0], agents[1:]

    def refused(code: str, what: str, join_token: str, agent_ids: list[str] | tuple[str, ...] = ()) -> None:
        s, resp = _open(ctx, join_token, agent_ids)
        with s:
            expect_error(resp, code, what, fatal=True)

    a, world = _world(ctx, agent_ids=[first])
    with a:
        if list(world.agent_ids) != [first] or not world.owner or not world.world_id or not world.join_token:
            raise Violation(f"creating a world for {first!r} answered {world}: expected agent_ids [{first!r}], owner")
        refused("NOT_FOUND", "a join with an unknown token", "certify-no-such-world")
        refused("FAILED_PRECONDITION", f"a join for {first!r}, which the owner acts for", world.join_token, [first])
        b, joined = _world(ctx, join_token=world.join_token)
        with b:
            if sorted(joined.agent_ids) != sorted(rest) or joined.owner or joined.world_id != world.world_id:
                raise Violation(f"a join for the free agents answered {joined}: expected {rest}, not owner, same world")
            refused("FAILED_PRECONDITION", "a join when every agent has a session", world.join_token)
            expect_ok(a.reset(seed=_SEEDS[0]), "reset", "the owner's reset")
            expect_ok(b.reset(), "reset", "the joined session's reset")
            expect_ok(b.close(), "close", "the joined session leaving")
        c, resp = _open(ctx, world.join_token)
        if _kind(resp) != "handshake":
            c.cancel()
            raise Violation(
                f"after the joined session left, a join for its agents {rest} was refused ({describe(resp)}): "
                "a leaving session must free its agents"
            )
        again = resp.handshake.world
        with c:
            if sorted(again.agent_ids) != sorted(rest):
                raise Violation(f"after the joined session left, a new join got {list(again.agent_ids)}, not {rest}")
            expect_ok(a.close(), "close", "the owner leaving")
            now = expect_ok(_observe(c), "observe", "observe after the owner left").time_step
            if not now.episode_id:
                raise Violation("after the owner left, the world's episode was gone for the session still in it")
            r = expect_ok(c.reset(seed=_SEEDS[1]), "reset", "a reset by the session that now owns the world")
            if r.time_step.episode_id == now.episode_id:
                raise Violation("the remaining session's reset did not start a new episode: ownership did not pass")
    return "create, join, refusals, leave and rejoin, ownership passing"


__all__ = ["joins", "reward_sum", "turn_order", "views_private"]
