"""Level ``multiagent``: multi-agent worlds (RFC 0012, docs/multiagent.md).

Skipped unless the server advertises ``Capabilities.multi_agent``; gRPC only (OpenEnv's JSON
frames carry a self-play session's summary, not per-agent views, joins or joint actions). The
checks play whole episodes of a world with candidate actions (the declared examples, then
generated ones); an action the environment refuses is not a step, so the next candidate is tried.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable
from typing import Any

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import multiagent_pb2, payload_pb2
from openenv.values import to_value
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, Violation
from openenv_conformance.registry import check
from openenv_conformance.spec import decode_payload
from openenv_conformance.strategies import Action
from openenv_conformance.transport import (
    GRPC,
    PROTOCOL_VERSION,
    SessionLike,
    code_name,
    describe,
    expect_error,
    expect_ok,
)

_SPEC = "RFC 0012 (docs/rfcs/0012-multi-agent.md), docs/multiagent.md"
_WHY = "gRPC only: OpenEnv's JSON frames carry no per-agent views, joins or joint actions (RFC 0012, Transports)"
_SEEDS = (11, 12)
_MAX_WORLD_STEPS = 64  # a world that has not ended by then is given up (the check says so)
# The exploring checks (RFC 0016): episodes of random legal moves, each seed a new one, the moves
# not yet tried after the same history first, until every terminal path is reached or the budget
# (episodes, requests) is spent. Measured on the catalog's games: see conformance/README.md.
_EXPLORE_SEED = 0x0016
_EXPLORE_EPISODES = 48
_EXPLORE_REQUESTS = 600


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


def _attempt(s: SessionLike, joint: dict[str, Action], turn_based: bool) -> pb.TimeStep | None:
    """One world step of a self-play session with these moves (one agent's when turn-based,
    else a joint step; one request): the new time step, or None when it was refused (a
    non-fatal error). Anything else is a Violation. The one step loop of the self-play
    episodes (:func:`_play_self`, :func:`_explore`)."""
    if turn_based:
        ((agent, action),) = joint.items()
        resp = _step(s, action, agent)
    else:
        st = pb.StepRequest()
        for agent, act in joint.items():
            st.actions[agent].CopyFrom(act.payload)
        resp = s.exchange(s.request(step=st))
    if isinstance(resp, pb.SessionResponse) and _kind(resp) == "step":
        return resp.step.time_step
    if not isinstance(resp, pb.SessionResponse) or _kind(resp) != "error" or resp.error.fatal:
        what = "a step" if turn_based else "a joint step"
        raise Violation(f"{what} of a self-play session with {joint!r} answered {describe(resp)}")
    return None


def _play_self(ctx: Context, s: SessionLike, seed: int, cands: list[Action], turn_based: bool) -> _Episode:
    """Play one episode in a self-play session: each world step, the first candidate(s) accepted."""
    ts = expect_ok(s.reset(seed=seed), "reset", f"reset(seed={seed}) of a self-play session").time_step
    steps, actions = [ts], []
    for _ in range(_MAX_WORLD_STEPS):
        if ts.terminated or ts.truncated or not ts.to_act:
            break
        for a in cands:
            chosen = {ts.to_act[0]: a} if turn_based else dict.fromkeys(ts.to_act, a)
            after = _attempt(s, chosen, turn_based)
            if after is not None:
                ts = after
                break
        else:
            break  # no candidate was accepted: the episode cannot go on
        steps.append(ts)
        actions.append(chosen)
    return _Episode(steps, actions, ts.terminated or ts.truncated)


def _legal_from_view(ctx: Context, ts: pb.TimeStep, agent: str, cands: list[Action]) -> list[Action] | None:
    """The agent's legal actions as its view lists them (``legal_actions``, or an ``action_mask``
    over an integer or enumerated action type), as actions; None when the view does not say."""
    part = ts.agents.get(agent)
    if part is None or part.observation.WhichOneof("kind") != "json":
        return None
    try:
        view = decode_payload(part.observation)
    except Exception:  # noqa: BLE001 - an undecodable view lists nothing; other checks judge it
        return None
    if not isinstance(view, dict):
        return None
    schema = ctx.spec.action.schema
    values: list[Any] | None = None
    legal = view.get("legal_actions")
    if isinstance(legal, list) and all(isinstance(v, (int, str)) for v in legal):
        values = list(legal)
    mask = view.get("action_mask")
    if values is None and isinstance(mask, list):
        if isinstance(schema.get("enum"), list) and len(schema["enum"]) == len(mask):
            values = [v for v, m in zip(schema["enum"], mask, strict=True) if m]
        elif schema.get("type") == "integer":
            start = int(schema.get("minimum", 0))
            values = [start + i for i, m in enumerate(mask) if m]
    if values is None:
        return None
    by_label = {}
    for c in cands:
        if c.payload.WhichOneof("kind") == "json":
            try:
                by_label[repr(decode_payload(c.payload))] = c
            except Exception:  # noqa: BLE001
                continue
    out = []
    for v in values:
        if repr(v) in by_label:
            out.append(by_label[repr(v)])
        elif ctx.spec.action.validator is None or ctx.spec.action.validator.is_valid(v):
            p = payload_pb2.Payload()
            to_value(v, p.json)
            out.append(Action(p, f"legal {v!r}"))
    return out


@dataclasses.dataclass
class _Explored:
    """What the exploration played: its ended episodes (seed, time steps, moves) and its cost."""

    episodes: list[tuple[int, _Episode]]
    paths: set[tuple[str, ...]]
    requests: int
    exhausted: bool  # every move of every history reached was tried (no budget cut it short)


def _explore(ctx: Context, s: SessionLike, turn_based: bool) -> _Explored:
    """Self-play episodes of random legal moves over many seeds, within the budget: at each world
    step the moves not yet tried after the same history are tried first (so every terminal path
    of a small game is reached), then any legal one; a refused move is not a step."""
    cands = _candidates(ctx)
    rng = random.Random(_EXPLORE_SEED)
    tried: dict[tuple[str, ...], set[str]] = {}
    out = _Explored([], set(), 0, False)
    untried_left = False
    for k in range(_EXPLORE_EPISODES):
        if out.requests >= _EXPLORE_REQUESTS:
            break
        seed = 1000 + k
        ts = expect_ok(s.reset(seed=seed), "reset", f"reset(seed={seed}) of a self-play session").time_step
        out.requests += 1
        steps: list[pb.TimeStep] = [ts]
        moves: list[dict[str, Action]] = []
        history: tuple[str, ...] = ()
        while not (ts.terminated or ts.truncated) and ts.to_act and len(moves) < _MAX_WORLD_STEPS:
            if out.requests >= _EXPLORE_REQUESTS:
                break
            options: dict[str, list[Action]] = {}
            for agent in ts.to_act:
                legal = _legal_from_view(ctx, ts, agent, cands)
                options[agent] = list(legal) if legal else list(cands)
                rng.shuffle(options[agent])
            seen = tried.setdefault(history, set())
            if turn_based:
                agent = ts.to_act[0]
                order = sorted(options[agent], key=lambda a: repr(a) in seen)  # untried first (stable)
                untried_left = untried_left or sum(repr(a) not in seen for a in order) > 1
                attempts: Iterable[dict[str, Action]] = ({agent: a} for a in order)
            else:  # up to 8 random joint moves, each drawn when tried
                attempts = ({agent: rng.choice(options[agent]) for agent in ts.to_act} for _ in range(8))
            accepted = None
            for joint in attempts:
                after = _attempt(s, joint, turn_based)
                out.requests += 1
                if turn_based:
                    seen.add(repr(joint[agent]))
                if after is not None:
                    accepted = (joint, after)
                    break
                if turn_based and out.requests >= _EXPLORE_REQUESTS:
                    break
            if accepted is None:
                break
            joint_done, ts = accepted
            moves.append(joint_done)
            steps.append(ts)
            history = (*history, "|".join(f"{a}={joint_done[a]!r}" for a in sorted(joint_done)))
        if ts.terminated or ts.truncated:
            out.paths.add(history)
            out.episodes.append((seed, _Episode(steps, moves, True)))
    else:
        out.exhausted = not untried_left
    return out


def _returns(agents: list[str], ep: _Episode) -> dict[str, float]:
    returns = dict.fromkeys(agents, 0.0)
    for ts in ep.steps:
        for agent, part in ts.agents.items():
            if part.HasField("reward"):
                returns[agent] += part.reward
    return returns


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
        with ctx.session() as s:  # RFC 0016: explored episodes too, not only the first moves of two seeds
            explored = _explore(ctx, s, turn_based)
        differed = any(len(set(_views(ts).values())) > 1 for _, ep in explored.episodes for ts in ep.steps)
    if spec.hidden_information and not differed:
        raise Violation(
            "the environment declares hidden_information, yet at every world step of the played and explored "
            "episodes every agent saw exactly what every other agent saw: each agent's private information "
            "reaches the others"
        )
    return f"{compared} views compared with self-play" if compared else "views filtered per session"


@check(
    "multiagent.reward_sum",
    "When MultiAgentSpec.reward_sum is declared, each episode's per-agent returns sum over the agents to it, on "
    "every explored path (random legal moves over many seeds, untried moves first, within a budget)",
    f"{_SPEC}: Semantics, Rewards",
    requires=(GRPC,),
    why=_WHY,
)
def reward_sum(ctx: Context) -> str:
    spec = _spec(ctx)
    if not spec.HasField("reward_sum"):
        raise CheckSkipped("the environment declares no reward_sum")
    tol = max(ctx.spec.tolerance, 1e-9)
    agents = _agents(spec)
    with ctx.session() as s:
        explored = _explore(ctx, s, _turn_based(spec))
    for seed, ep in explored.episodes:
        returns = _returns(agents, ep)
        total = sum(returns.values())
        if not math.isfinite(total) or abs(total - spec.reward_sum) > tol:
            moves = " ".join("/".join(f"{a}:{m!r}" for a, m in joint.items()) for joint in ep.actions)
            raise Violation(
                f"episode seed {seed} (moves {moves}): the agents' returns {returns} sum to {total:g}, "
                f"not the declared reward_sum {spec.reward_sum:g}"
            )
    if not explored.episodes:
        raise CheckNotExercised(
            f"no explored episode ended within {_MAX_WORLD_STEPS} world steps ({explored.requests} requests)"
        )
    every = "every terminal path" if explored.exhausted else f"{len(explored.paths)} terminal paths"
    return f"{len(explored.episodes)} explored episodes ({every}) summed to {spec.reward_sum:g}"


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


_SPEC16 = "RFC 0016 (docs/rfcs/0016-worlds-that-behave.md), docs/multiagent.md"
_DEADLINE_S = 0.3  # a wait_timeout the certifier sends: the server must end the wait by itself


def _pair(ctx: Context, spec: multiagent_pb2.MultiAgentSpec) -> tuple[SessionLike, SessionLike, list[str], str]:
    """The owner (acting for the first agent), a session that joined for the others, the joined
    session's agents and the world's join token."""
    agents = _agents(spec)
    a, world = _world(ctx, agent_ids=[agents[0]])
    try:
        b, joined = _world(ctx, join_token=world.join_token)
    except BaseException:
        a.cancel()
        raise
    return a, b, list(joined.agent_ids), world.join_token


def _bounded(s: SessionLike, req: pb.SessionRequest, what: str) -> Any:
    """The answer to ``req``, which carries a wait_timeout: no answer at all is the violation."""
    try:
        return s.exchange(req)
    except Violation as e:
        raise Violation(f"{what}: {e}: the server did not end the wait at its wait_timeout") from None


@check(
    "multiagent.wait_deadlines",
    "With world_wait_timeouts, a request waiting on other sessions is answered DEADLINE_EXCEEDED (not fatal) "
    "when its SessionRequest.wait_timeout passes, nothing changed: the session answers its next request at once, "
    "and a simultaneous step's actions are withdrawn (never played with the other agents' later actions)",
    f"{_SPEC16}: Semantics, Wait deadlines",
    requires=(GRPC,),
    why=_WHY,
)
def wait_deadlines(ctx: Context) -> str:
    spec = _spec(ctx)
    if not ctx.info.capabilities.world_wait_timeouts:
        raise CheckSkipped("the server does not advertise Capabilities.world_wait_timeouts")
    if len(_agents(spec)) < 2 or not spec.joinable:
        raise CheckSkipped("one agent, or worlds are not joinable: nobody else to wait for")
    cands = _candidates(ctx)
    a, b, b_agents, _ = _pair(ctx, spec)
    with a, b:
        ta = expect_ok(a.reset(seed=_SEEDS[0]), "reset", "the owner's reset").time_step
        expect_ok(b.reset(), "reset", "the joined session's reset")
        if _turn_based(spec):
            waiter = b if ta.to_act and ta.to_act[0] not in b_agents else a
            req = waiter.request(observe=pb.ObserveRequest(wait=True))
            req.wait_timeout.FromNanoseconds(int(_DEADLINE_S * 1e9))
            what = f"observe(wait) with wait_timeout {_DEADLINE_S:g} s while another session's agent is to act"
            expect_error(_bounded(waiter, req, what), "DEADLINE_EXCEEDED", what, fatal=False)
            expect_ok(_observe(waiter), "observe", f"a plain observe after {what} timed out")
            return "an observe that passed its wait_timeout was ended by the server; the session answered next"
        if not ta.to_act:
            raise CheckNotExercised("nobody is to act after the reset: no joint step to wait on")
        mine = [x for x in ta.to_act if x not in b_agents]
        theirs = [x for x in ta.to_act if x in b_agents]
        if not mine or not theirs:
            raise CheckNotExercised("the agents to act are all one session's: nobody to wait for")
        for first in cands:
            st = pb.StepRequest()
            for agent in mine:
                st.actions[agent].CopyFrom(first.payload)
            req = a.request(step=st)
            req.wait_timeout.FromNanoseconds(int(_DEADLINE_S * 1e9))
            resp = _bounded(a, req, "a simultaneous step with wait_timeout, the other session silent")
            if _kind(resp) == "error" and code_name(resp.error.code) == "INVALID_ARGUMENT":
                continue  # not a legal move here: nothing was gathered
            expect_error(resp, "DEADLINE_EXCEEDED", "a simultaneous step whose wait_timeout passed", fatal=False)
            break
        else:
            raise CheckNotExercised("no candidate action was accepted into a joint step")
        for second in cands:
            st = pb.StepRequest()
            for agent in theirs:
                st.actions[agent].CopyFrom(second.payload)
            req = b.request(step=st)
            req.wait_timeout.FromNanoseconds(int(_DEADLINE_S * 1e9))
            resp = b.exchange(req)
            if (
                isinstance(resp, pb.SessionResponse)
                and _kind(resp) == "error"
                and code_name(resp.error.code) == "INVALID_ARGUMENT"
            ):
                continue
            if _kind(resp) == "step":
                raise Violation(
                    "a simultaneous step whose wait_timeout had passed was played later: the other session's step "
                    "was answered with a world step made with the withdrawn actions"
                )
            expect_error(
                resp, "DEADLINE_EXCEEDED", "the other session's step after the first one's withdrew", fatal=False
            )
            break
        return "a joint step's actions were withdrawn at its wait_timeout, never played"


@check(
    "multiagent.seat_events",
    "With seat_events, a session is told when another session of its world leaves (LEFT with its agents; a "
    "rejoin deadline within the declared rejoin_timeout during a running episode) and joins (JOINED): "
    "observe(wait, seat_events) answers for it",
    f"{_SPEC16}: Semantics, Seat events",
    requires=(GRPC,),
    why=_WHY,
)
def seat_events(ctx: Context) -> str:
    spec = _spec(ctx)
    if not ctx.info.capabilities.seat_events:
        raise CheckSkipped("the server does not advertise Capabilities.seat_events")
    if len(_agents(spec)) < 2 or not spec.joinable:
        raise CheckSkipped("one agent, or worlds are not joinable: no other seat")
    a, b, b_agents, token = _pair(ctx, spec)
    with a:
        with b:
            expect_ok(a.reset(seed=_SEEDS[0]), "reset", "the owner's reset")
            expect_ok(b.reset(), "reset", "the joined session's reset")
            expect_ok(_observe(a), "observe", "the owner's observe")  # takes the JOINED event
            expect_ok(b.close(), "close", "the joined session leaving")
        o = pb.ObserveRequest(wait=True, seat_events=True)
        o.timeout.FromNanoseconds(int(ctx.options.timeout * 1e9 / 2))
        ts = expect_ok(
            a.exchange(a.request(observe=o)), "observe", "observe(wait, seat_events) after a leave"
        ).time_step
        left = [e for e in ts.seat_events if e.kind == multiagent_pb2.SEAT_EVENT_KIND_LEFT]
        if not left or sorted(left[-1].agent_ids) != sorted(b_agents):
            raise Violation(
                f"after the session acting for {b_agents} left, the owner's time step carries seat events "
                f"{[(e.kind, list(e.agent_ids)) for e in ts.seat_events]}: expected LEFT for {b_agents}"
            )
        running = not (ts.terminated or ts.truncated)
        if running and spec.HasField("rejoin_timeout"):
            limit = spec.rejoin_timeout.ToNanoseconds() / 1e9
            if not left[-1].HasField("rejoin_within"):
                raise Violation("a seat left during a running episode, with rejoin_timeout declared: no rejoin_within")
            within = left[-1].rejoin_within.ToNanoseconds() / 1e9
            if not 0 <= within <= limit:
                raise Violation(f"rejoin_within {within:g} s is outside the declared rejoin_timeout of {limit:g} s")
        c, _ = _world(ctx, join_token=token)
        with c:
            ts = expect_ok(a.exchange(a.request(observe=o)), "observe", "observe(wait, seat_events) after a join")
            kinds = [e.kind for e in ts.time_step.seat_events]
            if multiagent_pb2.SEAT_EVENT_KIND_JOINED not in kinds:
                raise Violation(f"after a session joined, the owner's seat events are {kinds}: expected JOINED")
    return "LEFT (with its rejoin deadline) and JOINED announced"


__all__ = ["joins", "reward_sum", "seat_events", "turn_order", "views_private", "wait_deadlines"]
