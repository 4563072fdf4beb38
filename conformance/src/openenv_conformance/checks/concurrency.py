"""Level ``concurrency``: isolation between sessions, capacity, slots freed by dropped clients."""

from __future__ import annotations

import time

import grpc
from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv_conformance.canonical import canonical, diff, trajectory
from openenv_conformance.checks._connections import end_all, own_connection
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.model import EpisodeModel
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action
from openenv_conformance.transport import (
    EPISODE_FIELDS,
    GRPC,
    Answer,
    NoAnswer,
    SessionLike,
    StreamEnd,
    describe,
    expect_error,
    expect_ok,
)

_SPEC = "docs/protocol.md"


def _capacity(ctx: Context) -> int:
    cap = int(ctx.spec.caps.max_sessions)
    if cap <= 0:
        raise CheckSkipped("the environment declares no capacity (max_sessions = 0)")
    if cap > ctx.options.capacity_limit:
        raise CheckSkipped(
            f"max_sessions {cap} is above the suite's capacity limit "
            f"({ctx.options.capacity_limit}; raise it with --capacity-limit)"
        )
    return cap


def _open_many(ctx: Context, n: int, channel: grpc.aio.Channel | None = None) -> tuple[list[SessionLike], list]:
    """Send ``n`` handshakes at once: (sessions, their answers)."""
    sessions = []
    for _ in range(n):
        # Each stream's handshake goes out as soon as the stream exists, not after all ``n`` are
        # created: a server's handshake deadline runs from the stream's headers, and creating 1,024
        # streams first takes seconds on a loaded machine (a 2 s deadline then refused the first).
        s = ctx.wire.session(channel)
        s.send(s.request(handshake=pb.HandshakeRequest(protocol_version="1.0", client_name="openenv-certify")))
        sessions.append(s)
    answers = []
    for s in sessions:
        r = s.recv()
        if isinstance(r, pb.SessionResponse) and r.WhichOneof("kind") == "handshake":
            s.opened = True
        answers.append(r)
    return sessions, answers


def _fill(ctx: Context, cap: int, channel: grpc.aio.Channel | None = None) -> list[SessionLike]:
    """Exactly ``cap`` open sessions (retrying while slots of earlier sessions are being freed)."""
    deadline = time.monotonic() + ctx.options.slot_free_bound
    while True:
        sessions, answers = _open_many(ctx, cap, channel)
        opened = [s for s, a in zip(sessions, answers, strict=True) if s.opened]
        if len(opened) == cap:
            return sessions
        refused = [a for s, a in zip(sessions, answers, strict=True) if not s.opened]
        end_all(sessions, min(10.0, ctx.options.timeout))
        if time.monotonic() > deadline:
            raise Violation(
                f"only {len(opened)} of max_sessions={cap} sessions could be opened (first refusal: "
                f"{describe(refused[0])}), {ctx.options.slot_free_bound:g} s after earlier sessions ended"
            )
        time.sleep(0.2)


def _handshake_within(ctx: Context, what: str) -> float:
    """Seconds until a new handshake succeeds (Violation after the bound)."""
    t0 = time.monotonic()
    bound = ctx.options.slot_free_bound
    last: Answer | None = None
    while time.monotonic() - t0 < bound:
        s = ctx.wire.session()
        last = s.handshake()
        if s.opened:
            s.shutdown()
            return time.monotonic() - t0
        s.cancel()
        time.sleep(0.05)
    answer = "none" if last is None else describe(last)
    raise Violation(f"{what}: no session slot was free within {bound:g} s (last answer: {answer})")


@check(
    "concurrency.isolation",
    "Sessions stepped side by side (interleaved) behave as when run alone: identical trajectories for a "
    "deterministic environment, independent episode ids and step counts for any environment",
    f"{_SPEC} §1.1 (one instance per session)",
    requires=(EPISODE_FIELDS,),
)
def isolation(ctx: Context) -> None:
    valid = ctx.require_actions()
    n = min(ctx.options.concurrency, int(ctx.spec.caps.max_sessions or 1))
    if n < 2 or not ctx.spec.caps.concurrent_sessions:
        raise CheckSkipped(f"the environment allows {n} concurrent session(s)")
    deterministic = ctx.spec.caps.deterministic
    tol = ctx.spec.tolerance

    def interleaved(seeds: list[int], episodes: list[list[Action]]) -> None:
        ids = [f"isolation-{i}" for i in range(n)]
        sessions = [ctx.session() for _ in range(n)]
        models = [EpisodeModel(ctx.spec) for _ in range(n)]
        for s, seed, eid in zip(sessions, seeds, ids, strict=True):
            s.send(s.request(reset=pb.ResetRequest(seed=seed, episode_id=eid)))
        runs: list[list[dict]] = []
        for s, m, eid in zip(sessions, models, ids, strict=True):
            r = s.recv()
            m.on_reset(r, eid)
            runs.append([canonical(r, ctx.spec)])
        for k in range(max(len(e) for e in episodes)):
            live = [i for i in range(n) if k < len(episodes[i]) and not models[i].ended]
            for i in live:
                sessions[i].send(sessions[i].request(step=pb.StepRequest(action=episodes[i][k].payload)))
            for i in live:
                r = sessions[i].recv()
                models[i].on_step(r, f"session {i} step {k + 1} ({episodes[i][k]!r}) among {n} interleaved sessions")
                runs[i].append(canonical(r, ctx.spec))
        for i, (s, m) in enumerate(zip(sessions, models, strict=True)):
            m.on_state(s.state(), f"state of session {i} after interleaved steps")
        for s in sessions:
            s.shutdown()
        if deterministic:
            for i in range(n):
                with ctx.session() as s:
                    alone = trajectory(s, ctx.spec, seeds[i], ids[i], episodes[i])
                d = diff(alone, runs[i], tol)
                if d:
                    raise Violation(
                        f"session {i} (seed {seeds[i]}) gave a different trajectory interleaved with "
                        f"{n - 1} other sessions than alone: {d}"
                    )

    ctx.search(
        interleaved,
        max_examples=max(3, ctx.options.max_examples // 5),
        seeds=st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n),
        episodes=st.lists(st.lists(valid, max_size=ctx.spec.budget), min_size=n, max_size=n),
    )


@check(
    "concurrency.capacity",
    "max_sessions sessions can be open at once; one more handshake is RESOURCE_EXHAUSTED (fatal) and its stream "
    "ends; GetInfo still answers; closing a session frees its slot",
    f"{_SPEC} §1.3, §3.3; error table: RESOURCE_EXHAUSTED (session capacity)",
)
def capacity(ctx: Context) -> None:
    cap = _capacity(ctx)
    with own_connection(ctx) as channel:
        sessions = _fill(ctx, cap, channel)
        extra = ctx.wire.session(channel)
        resp = extra.handshake()
        if extra.opened:
            more, _ = _open_many(ctx, min(cap, 16), channel)
            accepted = 1 + sum(s.opened for s in more)
            raise Violation(f"a handshake beyond max_sessions={cap} was accepted ({accepted} more sessions opened)")
        expect_error(
            resp, "RESOURCE_EXHAUSTED", f"a handshake with {cap} of max_sessions={cap} sessions open", fatal=True
        )
        end, _ = extra.wait_end()
        if not isinstance(end, StreamEnd):
            raise Violation("the refused handshake's stream did not end")
        info = ctx.wire.get_info()
        if info.name != ctx.info.name:
            raise Violation("GetInfo at capacity described another environment")
        victim = sessions[0]
        expect_ok(victim.close(), "close", "close at capacity")
        victim.wait_end()
        _handshake_within(ctx, "after one of the sessions at capacity was closed")


@check(
    "concurrency.disconnect_frees_slot",
    "A client that disappears (cancelled stream, closed connection) frees its session slot within the bound "
    "(default 10 s)",
    f"{_SPEC} §3.7 (the server frees the session in every case)",
)
def disconnect_frees_slot(ctx: Context) -> None:
    cap = _capacity(ctx)
    for how in ("a cancelled stream", "a closed connection"):
        channel = ctx.wire.new_channel()
        victim = ctx.session(channel=channel)
        if ctx.spec.sim:
            expect_ok(victim.reset(), "reset", "reset")
        with own_connection(ctx) as fill:
            if cap > 1:
                _fill(ctx, cap - 1, fill)
            probe = ctx.wire.session()
            expect_error(probe.handshake(), "RESOURCE_EXHAUSTED", "a handshake at capacity", fatal=True)
            if how == "a cancelled stream":
                victim.cancel()
            else:
                ctx.wire.close_channel(channel)
            _handshake_within(ctx, f"after {how} at capacity")


# --------------------------------------------------------------------------- RFC 0007


@check(
    "concurrency.event_loop_live",
    "The server stays live while a step runs: a step sent with a timeout is answered (with its time step or "
    "DEADLINE_EXCEEDED) within the timeout plus a bound, and another session of the same server is answered "
    "within the bound meanwhile (a step that blocks the event loop stalls every session and defeats timeouts)",
    f"{_SPEC} §3.5 (liveness: a step never delays other sessions; timeouts fire on time)",
    requires=(GRPC,),
    why="gRPC only: OpenEnv's step frame carries no timeout",
)
def event_loop_live(ctx: Context) -> str | None:
    actions = ctx.accepted_actions(2)
    bound = ctx.options.liveness_bound
    step_timeout = 0.5
    wait = max(ctx.options.timeout, step_timeout + 3 * bound)
    a_session = ctx.session()
    model = EpisodeModel(ctx.spec)
    model.on_reset(a_session.reset())
    other = None
    if ctx.capacity >= 2:
        other = ctx.session()
    for i in range(3):
        a = actions[i % len(actions)]
        st_ = pb.StepRequest(action=a.payload)
        st_.timeout.FromNanoseconds(int(step_timeout * 1e9))
        started = time.monotonic()
        a_session.send(a_session.request(step=st_))
        if other is not None:
            asked = time.monotonic()
            expect_ok(other.exchange(other.request(state=pb.StateRequest()), wait), "state", "state of another session")
            waited = time.monotonic() - asked
            if waited > bound:
                raise Violation(
                    f"while one session's step ran (timeout {step_timeout:g} s), another session's state request "
                    f"waited {waited:.1f} s (bound {bound:g} s): the step blocks the server's event loop"
                )
        resp = a_session.recv(wait)
        took = time.monotonic() - started
        if took > step_timeout + bound:
            raise Violation(
                f"a step sent with a {step_timeout:g} s timeout was answered after {took:.1f} s "
                f"({describe(resp)}); the timeout must fire on time (bound {bound:g} s)"
            )
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error" and resp.error.code == 4:
            model.on_reset(a_session.reset())  # timed out: the episode is aborted
            continue
        model.on_step(resp, f"step {a!r} with a {step_timeout:g} s timeout")
        if model.ended:
            model.on_reset(a_session.reset())
    if other is None:
        return "capacity 1: only the timeout of the step was checked (no second session can be open)"
    return None


@check(
    "concurrency.idle_reaped",
    "A session idle for longer than Capabilities.idle_timeout is ended by the server (stream status "
    "DEADLINE_EXCEEDED) within a bound, and its slot is freed",
    f"{_SPEC} §3.7 (idle timeout)",
    requires=(GRPC,),
    why="gRPC only: the end of an idle session is a gRPC stream status",
)
def idle_reaped(ctx: Context) -> str:
    idle = ctx.spec.caps.idle_timeout.ToNanoseconds() / 1e9
    if idle <= 0:
        raise CheckSkipped("the server does not reap idle sessions (Capabilities.idle_timeout = 0)")
    if idle > ctx.options.idle_bound:
        raise CheckSkipped(
            f"idle_timeout is {idle:g} s, above the {ctx.options.idle_bound:g} s this check waits "
            "(raise it with --idle-bound)"
        )
    s = ctx.session()
    if ctx.spec.sim:
        expect_ok(s.reset(), "reset", "reset")
    started = time.monotonic()
    limit = idle + max(ctx.options.liveness_bound, idle)
    try:
        end, extra = s.wait_end(limit)
    except NoAnswer:
        raise Violation(
            f"a session idle for {limit:g} s was not reaped (idle_timeout {idle:g} s, bound {limit - idle:g} s)"
        ) from None
    took = time.monotonic() - started
    if extra:
        raise Violation(f"an idle session was sent an answer to no request: {describe(extra[0])}")
    if end.code != grpc.StatusCode.DEADLINE_EXCEEDED:
        raise Violation(f"an idle session ended after {took:.1f} s with the {end}; expected DEADLINE_EXCEEDED")
    _handshake_within(ctx, "after an idle session was reaped")
    return f"reaped after {took:.1f} s (idle_timeout {idle:g} s)"
