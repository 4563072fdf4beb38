"""Level ``vector``: vectorised sessions (RFC 0002, docs/protocol.md §3.9).

A handshake with ``num_envs = N > 1`` opens N instances behind one stream, driven by
``batch_reset`` / ``batch_step`` and read by ``state(env_id)``. Every check here is skipped
when the server offers no vectorised sessions (``Capabilities.max_num_envs < 2``); they are
gRPC only (OpenEnv's JSON protocol has no batches).
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv_conformance.canonical import canonical, canonical_time_step, diff
from openenv_conformance.checks._connections import own_connection
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, Violation
from openenv_conformance.model import HEX_ID, status_name
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action
from openenv_conformance.transport import GRPC, SessionLike, StreamEnd, code_name, describe, expect_error, expect_ok

_SPEC = "docs/protocol.md §3.9, RFC 0002"
_WHY = "gRPC only: vectorised sessions (batch_reset / batch_step) are not part of OpenEnv's JSON protocol"
DISABLED, NEXT_STEP, SAME_STEP = (pb.AUTORESET_MODE_DISABLED, pb.AUTORESET_MODE_NEXT_STEP, pb.AUTORESET_MODE_SAME_STEP)
_MODE_NAMES = {DISABLED: "DISABLED", NEXT_STEP: "NEXT_STEP", SAME_STEP: "SAME_STEP"}


def _max_envs(ctx: Context) -> int:
    ctx.require_sim()
    m = int(ctx.spec.caps.max_num_envs)
    if m < 2:
        raise CheckSkipped(f"the server offers no vectorised sessions (Capabilities.max_num_envs = {m})")
    return m


def _vector(
    ctx: Context, n: int, mode: pb.AutoresetMode = pb.AUTORESET_MODE_UNSPECIFIED, channel: Any = None
) -> SessionLike:
    """An open vectorised session of ``n`` instances (retrying while earlier slots are freed),
    on ``channel`` (default: the wire's shared one)."""
    deadline = time.monotonic() + ctx.options.slot_free_bound
    while True:
        s = ctx.wire.session(channel)
        resp = s.handshake(num_envs=n, autoreset_mode=mode)
        if s.opened:
            return s
        s.cancel()
        refused = (
            isinstance(resp, pb.SessionResponse)
            and resp.WhichOneof("kind") == "error"
            and code_name(resp.error.code) == "RESOURCE_EXHAUSTED"
        )
        if not refused or time.monotonic() > deadline:
            expect_ok(resp, "handshake", f"a handshake with num_envs={n}, autoreset_mode={_MODE_NAMES.get(mode, mode)}")
        time.sleep(0.1)


def _state(s: SessionLike, env_id: int, what: str) -> tuple[str, int, str]:
    st_ = expect_ok(s.state(env_id), "state", f"state(env_id={env_id}) {what}")
    return st_.episode_id, st_.step_count, status_name(st_.status)


def _batch(resp: pb.SessionResponse | StreamEnd, ids: list[int], what: str) -> pb.BatchStepResponse:
    bs = expect_ok(resp, "batch_step", what)
    if list(bs.env_ids) != ids or len(bs.time_steps) != len(ids):
        raise Violation(
            f"{what}: answered env_ids {list(bs.env_ids)} with {len(bs.time_steps)} time steps, "
            f"expected env_ids {ids} with one time step each"
        )
    return bs


def _rejected(resp: pb.SessionResponse | StreamEnd) -> bool:
    """A non-fatal refusal the environment may give a valid-looking action."""
    if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error":
        if resp.error.fatal:
            raise Violation(f"a batch step was refused fatally: {describe(resp)}")
        return True
    return False


@check(
    "vector.batch_matches_sequential",
    "For a deterministic environment, N instances reset by batch_reset(seeds=[s]) (instance k seeded s+k) and "
    "stepped with generated actions by batch_step give the same time steps as N plain sessions seeded s..s+N-1 "
    "stepping the same actions",
    f"{_SPEC}; docs/protocol.md §1.3",
    requires=(GRPC,),
    why=_WHY,
)
def batch_matches_sequential(ctx: Context) -> None:
    m = _max_envs(ctx)
    if not ctx.spec.caps.deterministic:
        raise CheckSkipped(
            "the environment declares itself nondeterministic: batched and sequential runs need not agree"
        )
    valid = ctx.require_actions()
    n = min(m, 3)
    tol = ctx.spec.tolerance

    def same(seed: int, episodes: list[list[Action]]) -> None:
        plain: list[list[dict]] = []
        accepted: list[list[bool]] = []
        for k in range(n):
            with ctx.session() as s:
                first = canonical(s.reset(seed=seed + k), ctx.spec)
                run, ok = [first], []
                done = "observation" not in first or first["terminated"] or first["truncated"]
                for a in episodes[k]:
                    if done:
                        break
                    c = canonical(s.step(a), ctx.spec)
                    ok.append("observation" in c)
                    if "observation" in c:
                        run.append(c)
                        done = c["terminated"] or c["truncated"]
                plain.append(run)
                accepted.append(ok)
        v = _vector(ctx, n)
        br = expect_ok(v.batch_reset(seeds=[seed]), "batch_reset", f"batch_reset(seeds=[{seed}])")
        if list(br.env_ids) != list(range(n)) or len(br.time_steps) != n:
            raise Violation(
                f"batch_reset of all {n} instances answered env_ids {list(br.env_ids)} with "
                f"{len(br.time_steps)} time steps"
            )
        batched = [[canonical_time_step(ts, ctx.spec)] for ts in br.time_steps]
        episode_ids = [ts.episode_id for ts in br.time_steps]
        for j in range(max((len(ok) for ok in accepted), default=0)):
            ids = [k for k in range(n) if j < len(accepted[k]) and accepted[k][j]]
            if not ids:
                continue
            acts = [episodes[k][j] for k in ids]
            bs = _batch(v.batch_step(ids, acts), ids, f"batch_step({ids}, {acts!r})")
            for k, ts in zip(ids, bs.time_steps, strict=True):
                if ts.episode_id != episode_ids[k]:
                    raise Violation(
                        f"instance {k}: time step of episode {ts.episode_id!r}, its episode is {episode_ids[k]!r}"
                    )
                batched[k].append(canonical_time_step(ts, ctx.spec))
        v.shutdown()
        for k in range(n):
            for run in (plain[k], batched[k]):
                for c in run:
                    c.pop("episode_id", None)
            d = diff(plain[k], batched[k], tol)
            if d:
                raise Violation(
                    f"instance {k} (seed {seed}+{k}) stepped by batch_step differs from a plain session at {d}"
                )

    ctx.search(
        same,
        max_examples=max(3, ctx.options.max_examples // 5),
        seed=st.integers(0, 2**32 - 1),
        episodes=st.lists(st.lists(valid, max_size=ctx.spec.budget), min_size=n, max_size=n),
    )


@check(
    "vector.validation_is_atomic",
    "A batch_step with one invalid action, an env id out of range or repeated, or the wrong number of actions (and "
    "a batch_reset with the wrong number of seeds) is INVALID_ARGUMENT, not fatal, and no instance changes",
    f"{_SPEC}; error table: INVALID_ARGUMENT",
    requires=(GRPC,),
    why=_WHY,
)
def validation_is_atomic(ctx: Context) -> str | None:
    m = _max_envs(ctx)
    n = min(m, 3)
    good = ctx.accepted_actions(3)
    acts = [good[k % len(good)] for k in range(n)]
    bad = ctx.actions.invalid()
    invalid = [a for a in (ctx.sample(bad, 12) if bad is not None else []) if not a.label.startswith("tool arguments")]
    v = _vector(ctx, n)
    expect_ok(v.batch_reset(seeds=[ctx.seed_for("atomic") % 2**31]), "batch_reset", "batch_reset")
    first = v.batch_step(list(range(n)), acts)  # so that step counts are not all 0
    if not _rejected(first):
        _batch(first, list(range(n)), f"batch_step of every instance with {acts!r}")

    def snapshot(what: str) -> list[tuple[str, int, str]]:
        return [_state(v, k, what) for k in range(n)]

    cases: list[tuple[str, list[int], list[Action]]] = []
    for a in invalid[:3]:
        cases.append((f"the invalid action {a!r} for the last instance", list(range(n)), [*acts[:-1], a]))
    cases += [
        (f"env id {n} (out of range) last", [*range(n), n], [*acts, acts[0]]),
        ("env id 0 twice", [*range(n), 0], [*acts, acts[0]]),
        (f"{n - 1} actions for all {n} instances", [], acts[:-1]),
        (f"{n + 1} actions for {n} instances", list(range(n)), [*acts, acts[0]]),
    ]
    before = snapshot("before the invalid batches")
    for label, ids, actions in cases:
        what = f"batch_step({ids or 'all'}) with {label}"
        expect_error(v.batch_step(ids, actions), "INVALID_ARGUMENT", what, fatal=False)
        after = snapshot(f"after a refused {what}")
        if after != before:
            changed = [k for k in range(n) if after[k] != before[k]]
            raise Violation(
                f"{what} was refused but changed instance(s) {changed}: {before} -> {after}; a batch is "
                "validated as a whole before any instance steps"
            )
    for label, ids, seeds in (
        (f"{n + 1} seeds for {n} instances", [], list(range(n + 1))),
        (f"env id {n} (out of range)", [0, n], []),
    ):
        what = f"batch_reset({ids or 'all'}) with {label}"
        expect_error(v.batch_reset(ids, seeds), "INVALID_ARGUMENT", what, fatal=False)
        after = snapshot(f"after a refused {what}")
        if after != before:
            raise Violation(f"{what} was refused but changed the instances: {before} -> {after}")
    if not invalid:
        return "no invalid action payload could be generated; ids and counts were checked"
    return None


def _walk_to_end(
    ctx: Context, v: SessionLike, mode: pb.AutoresetMode, actions: list[Action], limit: int, eid: str
) -> tuple[int, pb.TimeStep | None, pb.TimeStep | None]:
    """Step instance 0 alone until its episode ends: (accepted steps, the ending time step,
    SAME_STEP: the new episode's first time step); (n, None, None) when it never ended."""
    name = _MODE_NAMES[mode]
    count = 0
    for i in range(limit):
        a = actions[i % len(actions)]
        resp = v.batch_step([0], [a])
        if _rejected(resp):
            continue
        bs = _batch(resp, [0], f"{name}: batch_step([0], [{a!r}])")
        ts = bs.time_steps[0]
        finals = dict(bs.final_time_steps)
        if mode == SAME_STEP and 0 in finals:
            return count + 1, finals[0], ts
        if finals:
            raise Violation(
                f"{name}: final_time_steps {sorted(finals)} in a step that ended nothing "
                f"(time step #{ts.step_count}, terminated={ts.terminated}, truncated={ts.truncated})"
                if mode == SAME_STEP
                else f"{name}: final_time_steps are for SAME_STEP only, got {sorted(finals)}"
            )
        if ts.step_count != count + 1 or ts.episode_id != eid:
            raise Violation(
                f"{name}: step {count + 1} of instance 0 answered step_count {ts.step_count}, episode "
                f"{ts.episode_id!r} (expected {count + 1}, {eid!r})"
                + (
                    "; an episode that ends in SAME_STEP must report its ending time step in final_time_steps[0]"
                    if mode == SAME_STEP
                    else ""
                )
            )
        count += 1
        if ts.terminated or ts.truncated:
            if mode == SAME_STEP:
                raise Violation(
                    f"{name}: the ending time step #{ts.step_count} came back in time_steps; it belongs "
                    "in final_time_steps[0], with the new episode's first time step in time_steps"
                )
            return count, ts, None
    return count, None, None


def _fresh(ts: pb.TimeStep, old: str, what: str) -> None:
    if ts.step_count != 0 or not ts.episode_id or ts.episode_id == old:
        raise Violation(
            f"{what}: expected the new episode's first time step (step_count 0, a new episode id), got "
            f"step_count {ts.step_count}, episode {ts.episode_id!r} (the ended one was {old!r})"
        )
    if not HEX_ID.fullmatch(ts.episode_id):
        raise Violation(f"{what}: the new episode id {ts.episode_id!r} is not a fresh uuid4 in hex")


@check(
    "vector.autoreset_modes",
    "An instance whose episode ended: DISABLED, a batch step naming it is FAILED_PRECONDITION and changes nothing; "
    "NEXT_STEP, the next batch step answers the reset's time step (step_count 0, a new episode id); SAME_STEP, the "
    "ending step is in final_time_steps and time_steps holds the new episode's first time step",
    f"{_SPEC}; proto AutoresetMode",
    requires=(GRPC,),
    why=_WHY,
)
def autoreset_modes(ctx: Context) -> str | None:
    _max_envs(ctx)
    actions = ctx.accepted_actions(4)
    limit = ctx.spec.budget
    allowed = int(ctx.spec.caps.action_budget) or 256
    if ctx.spec.max_episode_steps is not None and ctx.spec.max_episode_steps <= allowed:
        limit = max(limit, ctx.spec.max_episode_steps)
    seed = ctx.seed_for("autoreset") % 2**31
    seen = []
    for mode in (DISABLED, NEXT_STEP, SAME_STEP):
        name = _MODE_NAMES[mode]
        v = _vector(ctx, 2, mode)
        br = expect_ok(v.batch_reset(seeds=[seed]), "batch_reset", f"{name}: batch_reset")
        eid0 = br.time_steps[0].episode_id
        one = v.batch_step([1], [actions[0]])
        running1 = False
        if not _rejected(one):
            b1 = _batch(one, [1], f"{name}: batch_step([1])")
            ts1 = b1.time_steps[0]
            running1 = not (ts1.terminated or ts1.truncated) and not dict(b1.final_time_steps)
        before1 = _state(v, 1, f"({name})")
        count, end, first = _walk_to_end(ctx, v, mode, actions, limit, eid0)
        if end is None:
            v.shutdown()
            continue
        seen.append(name)
        if not (end.terminated or end.truncated) or end.step_count != count or end.episode_id != eid0:
            raise Violation(
                f"{name}: the ending time step of instance 0 is #{end.step_count} of {end.episode_id!r} "
                f"(terminated={end.terminated}, truncated={end.truncated}); expected #{count} of {eid0!r}, "
                "terminated or truncated"
            )
        ended = "TERMINATED" if end.terminated else "TRUNCATED"
        a = actions[0]
        if mode == DISABLED:
            expect_error(
                v.batch_step([0], [a]),
                "FAILED_PRECONDITION",
                f"{name}: batch_step of the ended instance 0",
                fatal=False,
            )
            if _state(v, 0, "after the refused step") != (eid0, count, ended):
                raise Violation(
                    f"{name}: a refused batch step changed the ended instance 0: state "
                    f"{_state(v, 0, '')}, expected {(eid0, count, ended)}"
                )
            if running1:
                expect_error(
                    v.batch_step([], [a, a]),
                    "FAILED_PRECONDITION",
                    f"{name}: batch_step of all instances, instance 0 ended",
                    fatal=False,
                )
                if _state(v, 1, "after the refused batch") != before1:
                    raise Violation(f"{name}: a batch refused because instance 0 ended still stepped instance 1")
        elif mode == NEXT_STEP:
            if _state(v, 0, "right after the end") != (eid0, count, ended):
                raise Violation(
                    f"{name}: right after its ending step, instance 0 reports {_state(v, 0, '')}; it is "
                    f"reset by the next step, so expected {(eid0, count, ended)}"
                )
            ids = [0, 1] if running1 else [0]
            bs = _batch(v.batch_step(ids, [a] * len(ids)), ids, f"{name}: batch_step({ids}) after instance 0 ended")
            _fresh(bs.time_steps[0], eid0, f"{name}: the step after instance 0 ended")
            if running1 and bs.time_steps[1].step_count != before1[1] + 1:
                raise Violation(
                    f"{name}: instance 1 stepped alongside answered step_count "
                    f"{bs.time_steps[1].step_count}, expected {before1[1] + 1}"
                )
            if _state(v, 0, "after the autoreset") != (bs.time_steps[0].episode_id, 0, "RUNNING"):
                raise Violation(f"{name}: after the autoreset instance 0 reports {_state(v, 0, '')}")
        else:
            assert first is not None
            _fresh(first, eid0, f"{name}: time_steps[0] of the ending step")
            if _state(v, 0, "after the ending step") != (first.episode_id, 0, "RUNNING"):
                raise Violation(
                    f"{name}: after the ending step instance 0 reports {_state(v, 0, '')}, expected "
                    f"{(first.episode_id, 0, 'RUNNING')}"
                )
        v.shutdown()
    if not seen:
        raise CheckNotExercised(f"no episode of instance 0 ended within {limit} steps of accepted actions")
    return None if len(seen) == 3 else f"an episode ended only in mode(s) {', '.join(seen)}"


@check(
    "vector.capacity",
    "num_envs beyond max_num_envs is RESOURCE_EXHAUSTED (fatal); every instance counts against max_sessions: "
    "vectorised sessions filling max_sessions leave no slot for another handshake, and closing one frees its slots",
    f"{_SPEC}; docs/protocol.md §1.3, §3.3; error table: RESOURCE_EXHAUSTED",
    requires=(GRPC,),
    why=_WHY,
)
def capacity(ctx: Context) -> str | None:
    m = _max_envs(ctx)
    cap = int(ctx.spec.caps.max_sessions)
    s = ctx.wire.session()
    resp = s.handshake(num_envs=m + 1)
    if s.opened:
        raise Violation(f"a handshake with num_envs={m + 1} (max_num_envs={m}) was accepted")
    expect_error(resp, "RESOURCE_EXHAUSTED", f"a handshake with num_envs={m + 1} (max_num_envs={m})", fatal=True)
    s.wait_end()
    if cap <= 0:
        return "max_sessions is not declared: instance counting was not checked"
    if cap > ctx.options.capacity_limit:
        raise CheckSkipped(f"max_sessions {cap} is above the suite's capacity limit ({ctx.options.capacity_limit})")
    # max_sessions / max_num_envs streams: on a connection of the check's own (see own_connection)
    with own_connection(ctx) as channel:
        held: list[tuple[SessionLike, int]] = []
        left = cap
        while left >= 2:
            k = min(m, left)
            held.append((_vector(ctx, k, channel=channel), k))
            left -= k
        if left == 1:
            held.append((ctx.session(channel=channel), 1))
        sizes = [k for _, k in held]
        for n, what in ((0, "a plain handshake"), (2, "a handshake with num_envs=2")):
            probe = ctx.wire.session()
            resp = probe.handshake(num_envs=n)
            if probe.opened:
                raise Violation(
                    f"{what} was accepted with max_sessions={cap} instances held by sessions of {sizes} "
                    "instances: each instance must count against max_sessions"
                )
            expect_error(resp, "RESOURCE_EXHAUSTED", f"{what} with every slot held by vectorised sessions", fatal=True)
            probe.wait_end()
        victim, k = held[0]
        expect_ok(victim.close(), "close", "close of a vectorised session")
        victim.wait_end()
        if k >= 2:
            _vector(ctx, k).shutdown()  # retries while the freed slots are released
    return None


@check(
    "vector.request_rules",
    "In a vectorised session reset, step, list_tools and call_tool are FAILED_PRECONDITION (not fatal) and state "
    "of an env id out of range is INVALID_ARGUMENT; in a plain session batch_reset and batch_step are "
    "FAILED_PRECONDITION (not fatal)",
    f"{_SPEC}; error table: FAILED_PRECONDITION, INVALID_ARGUMENT",
    requires=(GRPC,),
    why=_WHY,
)
def request_rules(ctx: Context) -> None:
    _max_envs(ctx)
    action = ctx.accepted_actions(1)[0]
    v = _vector(ctx, 2)
    expect_ok(v.batch_reset(), "batch_reset", "batch_reset of all instances")
    before = [_state(v, k, "after batch_reset") for k in range(2)]
    kinds: list[tuple[str, dict]] = [
        ("reset", {"reset": pb.ResetRequest()}),
        ("step", {"step": pb.StepRequest(action=action.payload)}),
    ]
    if ctx.spec.caps.tools:
        from openenv.v1 import tool_pb2

        kinds += [
            ("list_tools", {"list_tools": tool_pb2.ListToolsRequest()}),
            ("call_tool", {"call_tool": tool_pb2.CallToolRequest(name=ctx.tools[0].name if ctx.tools else "x")}),
        ]
    for name, kind in kinds:
        expect_error(
            v.exchange(v.request(**kind)), "FAILED_PRECONDITION", f"{name} in a vectorised session", fatal=False
        )
    after = [_state(v, k, "after the refused requests") for k in range(2)]
    if after != before:
        raise Violation(f"requests refused in a vectorised session changed its instances: {before} -> {after}")
    expect_error(v.state(2), "INVALID_ARGUMENT", "state(env_id=2) in a session of 2 instances", fatal=False)
    p = ctx.session()
    expect_error(p.batch_reset(), "FAILED_PRECONDITION", "batch_reset in a plain session", fatal=False)
    expect_error(p.batch_step([], [action]), "FAILED_PRECONDITION", "batch_step in a plain session", fatal=False)
    st_ = expect_ok(p.state(), "state", "state of the plain session after refused batch requests")
    if st_.status != pb.EPISODE_STATUS_NOT_STARTED:
        raise Violation(f"refused batch requests started an episode in a plain session ({status_name(st_.status)})")
