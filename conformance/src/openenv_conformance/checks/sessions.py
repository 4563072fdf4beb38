"""Level ``sessions``: sessions that survive (RFC 0006), for targets that offer them.

Resumption (``Capabilities.resume_grace``): a stream dropped with a step in flight is taken
over by a new stream presenting the resume token, and every request is applied exactly once.
Snapshots (``Capabilities.snapshots``): restore reproduces the original continuation, forks
are independent, and a snapshot of another environment or version is refused.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv_conformance.canonical import canonical, diff
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, Violation
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action
from openenv_conformance.transport import GRPC
from openenv_conformance.transport.base import PROTOCOL_VERSION, SessionLike, expect_error, expect_ok

_WHY = "resumption and snapshots are requests of the gRPC Session stream"


def _require_resume(ctx: Context) -> None:
    ctx.require_sim()
    g = ctx.spec.caps.resume_grace
    if not (g.seconds or g.nanos):
        raise CheckSkipped("the server does not offer resumable sessions (Capabilities.resume_grace unset)")


def _require_snapshots(ctx: Context) -> None:
    ctx.require_sim()
    if not ctx.spec.caps.snapshots:
        raise CheckSkipped("the environment does not offer snapshots (Capabilities.snapshots = false)")


def _handshake(s: SessionLike, what: str, **fields: Any) -> pb.HandshakeResponse:
    hs = pb.HandshakeRequest(protocol_version=PROTOCOL_VERSION, client_name="openenv-certify", **fields)
    out: pb.HandshakeResponse = expect_ok(s.exchange(s.request(handshake=hs)), "handshake", what)
    s.opened = True  # so that cleanup ends it with a close request: a resumable session ends only so
    return out


def _snapshot(s: SessionLike, what: str) -> pb.Snapshot:
    snap: pb.Snapshot = expect_ok(s.exchange(s.request(snapshot=pb.SnapshotRequest())), "snapshot", what).snapshot
    return snap


def _restore(s: SessionLike, snap: pb.Snapshot) -> Any:
    return s.exchange(s.request(restore=pb.RestoreRequest(snapshot=snap)))


def _play(ctx: Context, s: SessionLike, actions: list[Action]) -> list[dict[str, Any]]:
    """Step ``actions`` until the episode ends; the canonical answers."""
    out = []
    for a in actions:
        c = canonical(s.step(a), ctx.spec)
        out.append(c)
        if "observation" not in c or c["terminated"] or c["truncated"]:
            break
    return out


def _state(ctx: Context, s: SessionLike, what: str) -> tuple[str, int, int, Any]:
    st_ = expect_ok(s.state(), "state", what)
    return (
        st_.episode_id,
        st_.step_count,
        st_.status,
        ctx.spec.state.decode(st_.state) if st_.HasField("state") else None,
    )


@check(
    "sessions.resume_exactly_once",
    "A resumable session whose connection drops with a step in flight is taken over by a new stream "
    "presenting its resume token: the same session and episode, the in-flight step answered once, an "
    "answered request re-sent with its id answered from the record (not applied again), the step count exact",
    "RFC 0006 §2 (resume_token, resumable), docs/protocol.md §3.8",
    requires=[GRPC],
    why=_WHY,
)
def resume_exactly_once(ctx: Context) -> str:
    _require_resume(ctx)
    a1, a2 = (ctx.accepted_actions(2) * 2)[:2]
    seed = ctx.seed_for("resume")
    wire = ctx.grpc_wire()
    channel = wire.new_channel()
    s = wire.session(channel)
    hs = _handshake(s, "resumable handshake", resumable=True)
    if not hs.resume_token:
        raise Violation("Capabilities.resume_grace is set but a resumable handshake returned no resume_token")
    expect_ok(s.reset(seed=seed), "reset", "reset")
    first = s.request(step=pb.StepRequest(action=a1.payload))
    answered = canonical(s.exchange(first), ctx.spec)
    if "observation" not in answered or answered["terminated"] or answered["truncated"]:
        raise CheckNotExercised(f"the first accepted action {a1!r} does not leave the episode running")
    in_flight = s.request(step=pb.StepRequest(action=a2.payload))
    s.send(in_flight)
    wire.close_channel(channel)  # the connection drops with the second step in flight
    s2 = wire.session(wire.new_channel())
    again = _handshake(s2, "handshake with the resume token", resume_token=hs.resume_token)
    try:
        if not again.resumed or again.session_id != hs.session_id:
            raise Violation(
                f"the resume handshake opened session {again.session_id!r} (resumed={again.resumed}), "
                f"expected session {hs.session_id!r} resumed"
            )
        second = canonical(s2.exchange(in_flight), ctx.spec)
        if "observation" not in second:
            raise Violation(f"the step in flight at the drop, re-sent with its id, was answered {second}")
        replayed = canonical(s2.exchange(first), ctx.spec)
        d = diff(answered, replayed, ctx.spec.tolerance)
        if d:
            raise Violation(
                f"an answered step re-sent with its id after the resume was not answered from the record: differs "
                f"at {d} (first answer {answered}, replay {replayed}); it was applied again"
            )
        # Request ids are the session's, not the stream's: go on with the first stream's numbering.
        state = expect_ok(s2.exchange(s.request(state=pb.StateRequest())), "state", "state after the resume")
        if state.step_count != 2 or second["step_count"] != 2:
            raise Violation(
                f"after two steps (one in flight at the drop, one re-sent) the step count is {state.step_count} "
                f"(the in-flight step answered #{second['step_count']}); expected 2: a step was lost or applied twice"
            )
    finally:
        s2.exchange(s.request(close=pb.CloseRequest()))  # a resumable session ends by a close request only
    return "dropped with a step in flight; resumed, answered once"


@check(
    "sessions.restore_reproduces",
    "With Capabilities.snapshots and deterministic, restoring a snapshot taken at step t and replaying the "
    "same actions reproduces the original observations, rewards, flags and step counts from t",
    "RFC 0006 §3 (snapshot, restore), docs/protocol.md §1.3",
    requires=[GRPC],
    why=_WHY,
)
def restore_reproduces(ctx: Context) -> None:
    _require_snapshots(ctx)
    if not ctx.spec.caps.deterministic:
        raise CheckSkipped("the environment is not deterministic: a replay from a snapshot may differ")
    ctx.require_actions()

    def body(seed: int, actions: list[Action], cut: int) -> None:
        k = min(cut, len(actions))
        s = ctx.session()
        expect_ok(s.reset(seed=seed), "reset", "reset")
        prefix = _play(ctx, s, actions[:k])
        if prefix and ("observation" not in prefix[-1] or prefix[-1]["terminated"] or prefix[-1]["truncated"]):
            return
        snap = _snapshot(s, f"snapshot after {len(prefix)} steps")
        original = _play(ctx, s, actions[k:])
        restored = expect_ok(_restore(s, snap), "restore", "restore of the snapshot")
        if restored.step_count != len(prefix):
            raise Violation(
                f"restore reports step count {restored.step_count}, the snapshot was taken at {len(prefix)}"
            )
        replay = _play(ctx, s, actions[k:])
        d = diff(original, replay, ctx.spec.tolerance)
        if d:
            raise Violation(
                f"seed {seed}: after restoring the snapshot taken at step {len(prefix)}, the replay differs at {d}\n"
                f"  original: {original}\n  replay:   {replay}"
            )

    ctx.search(body, seed=st.integers(0, 2**32 - 1), actions=ctx.actions.episodes(), cut=st.integers(0, 4))


@check(
    "sessions.forks_independent",
    "Forks of a session start from its state (with determinism: the same actions give the same answers in "
    "every fork), are independent of each other (stepping one changes no other) and leave the forked "
    "session unchanged",
    "RFC 0006 §3 (fork)",
    requires=[GRPC],
    why=_WHY,
)
def forks_independent(ctx: Context) -> None:
    _require_snapshots(ctx)
    if ctx.spec.caps.max_forks < 2:
        raise CheckSkipped(f"Capabilities.max_forks is {ctx.spec.caps.max_forks}: fewer than two forks at once")
    ctx.require_actions()
    wire = ctx.grpc_wire()

    def body(seed: int, actions: list[Action]) -> None:
        s = ctx.session()
        expect_ok(s.reset(seed=seed), "reset", "reset")
        before = _state(ctx, s, "state before the fork")
        out = expect_ok(s.exchange(s.request(fork=pb.ForkRequest(count=2))), "fork", "fork of 2")
        if len(out.resume_tokens) != 2 or len(set(out.session_ids)) != 2 or s.session_id in out.session_ids:
            raise Violation(f"fork of 2 answered sessions {list(out.session_ids)} with {len(out.resume_tokens)} tokens")
        forks = []
        for token in out.resume_tokens:
            f = wire.session()
            _handshake(f, "handshake claiming a fork", resume_token=token)
            forks.append(f)
        starts = [_state(ctx, f, "state of a new fork") for f in forks]
        for i, got in enumerate(starts):
            if got[:3] != before[:3] or diff(before[3], got[3], ctx.spec.tolerance):
                raise Violation(f"fork {i} starts in state {got}, the forked session was in {before}")
        first = _play(ctx, forks[0], actions)
        if not first:
            return
        if ctx.spec.caps.deterministic:
            second = _play(ctx, forks[1], actions)
            d = diff(first, second, ctx.spec.tolerance)
            if d:
                raise Violation(
                    f"seed {seed}: the same actions in the second fork (after the first was stepped) differ at {d}: "
                    f"the forks share state\n  first fork:  {first}\n  second fork: {second}"
                )
        elif _state(ctx, forks[1], "state of the second fork")[:3] != starts[1][:3]:
            raise Violation("stepping the first fork changed the second fork's episode")
        after = _state(ctx, s, "state of the forked session after stepping its forks")
        if after[:3] != before[:3] or diff(before[3], after[3], ctx.spec.tolerance):
            raise Violation(f"stepping the forks changed the forked session: {before} became {after}")

    ctx.search(body, seed=st.integers(0, 2**32 - 1), actions=ctx.actions.episodes(max_size=6), max_examples=10)


@check(
    "sessions.foreign_snapshot_refused",
    "A snapshot of another environment name or version is refused with FAILED_PRECONDITION and an altered "
    "one with INVALID_ARGUMENT, neither fatal, and the session's state is unchanged",
    "RFC 0006 §3 (Snapshot, RestoreRequest), docs/protocol.md §5.2",
    requires=[GRPC],
    why=_WHY,
)
def foreign_snapshot_refused(ctx: Context) -> None:
    _require_snapshots(ctx)
    s, _ = ctx.episode(ctx.seed_for("foreign"))
    snap = _snapshot(s, "snapshot")
    accepted = ctx.accepted_actions(1)
    if accepted:
        s.step(accepted[0])  # the session moves on: a wrongly accepted restore would show
    before = _state(ctx, s, "state before the refused restores")

    def changed(field: str, value: Any) -> pb.Snapshot:
        other = pb.Snapshot()
        other.CopyFrom(snap)
        setattr(other, field, value)
        return other

    cases = [
        (changed("env_name", snap.env_name + "-other"), "FAILED_PRECONDITION", "a snapshot of another environment"),
        (changed("env_version", snap.env_version + ".99"), "FAILED_PRECONDITION", "a snapshot of another version"),
        (changed("environment", snap.environment + b"\x00"), "INVALID_ARGUMENT", "a snapshot with altered content"),
    ]
    for bad, code, what in cases:
        expect_error(_restore(s, bad), code, f"restore of {what}", fatal=False)
        after = _state(ctx, s, f"state after the refused restore of {what}")
        if after[:3] != before[:3] or diff(before[3], after[3], ctx.spec.tolerance):
            raise Violation(f"the refused restore of {what} changed the session: {before} became {after}")
