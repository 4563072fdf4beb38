"""Level ``concurrency``: isolation between sessions, capacity, slots freed by dropped clients."""

from __future__ import annotations

import time

import grpc
from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv_conformance.canonical import canonical, diff, trajectory
from openenv_conformance.checks._connections import end_all, own_connection
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, Violation
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


#: A stall shorter than this is never judged (seconds): the bound of "tens of milliseconds" the
#: liveness probe can tell from scheduling noise on a loaded 2-core machine. It is raised to
#: twice the idle probe's median when the machine is slower than that.
STALL_FLOOR_S = 0.010
#: A stall is judged a blocked event loop when, in the median round, the other session's longest
#: wait lasted at least this share of the step it overlapped (both measured at the same moment,
#: so a loaded machine slows them alike). A step that blocks the loop makes the other session
#: wait nearly all of it (measured: 0.87-0.98 in 3 rounds of 4, load average 17-25 on 2 cores); a step on a worker
#: thread, none of it when it waits, and when it computes in Python (holding the GIL) the share
#: of the GIL switch intervals the loop loses to it (measured: 0.32-0.34 in 3 rounds of 4, medians up to 0.55).
STALL_SHARE = 0.65
#: A step sent with a 1 us timeout and answered with its time step is judged late (its timeout
#: did not fire while it ran) when it was answered after this share of the step's own time.
LATE_SHARE = 0.5
#: Seconds of the environment's own step time the probe may spend (its rounds: 5 to 9).
LIVENESS_BUDGET_S = 6.0


#: Probes of the other session while one step runs, at most.
_PROBES_PER_STEP = 50


def _answered(s: SessionLike) -> bool:
    """Whether an answer of ``s`` has arrived (unread); True when the transport cannot tell."""
    arrived = getattr(s, "arrived", None)
    return True if arrived is None else bool(arrived())


def _low(xs: list[float]) -> float:
    """The lower quartile: a value most rounds reach. A loaded machine delays some rounds (the
    process descheduled), a blocking hook delays every one: judging by what three rounds in
    four show keeps the first from passing for the second."""
    ordered = sorted(xs)
    return ordered[len(ordered) // 4] if ordered else 0.0


def _median(xs: list[float]) -> float:
    ordered = sorted(xs)
    n = len(ordered)
    if not n:
        return 0.0
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f} ms"


@check(
    "concurrency.event_loop_live",
    "The server stays live while a step runs: another session is answered meanwhile (measured: its wait "
    "during steps, against the same probe while no step runs, must not grow by a share of the step's own "
    "time), and a step sent with a timeout is answered on time (a 1 us timeout is not answered with a time "
    "step long after it elapsed; a 0.5 s one within the bound)",
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
    other = ctx.session() if ctx.capacity >= 2 else None
    # Rounds: enough for medians (5), bounded by the environment's own step time (each round
    # runs three steps).
    rounds = max(5, min(9, int(LIVENESS_BUDGET_S / max(3 * ctx.step_time(), 1e-3))))
    idle: list[float] = []  # the other session's state round trip, no step running
    alone: list[float] = []  # a step's round trip, nothing else running
    during: list[tuple[float, float]] = []  # (the other session's longest wait during a step, the step's round trip)
    late: list[float] = []  # a step sent with a 1 us timeout, answered with a time step: its round trip
    timed_out = 0

    def restart_if_over() -> None:
        if model.ended:
            model.on_reset(a_session.reset())

    for i in range(rounds):
        a = actions[i % len(actions)]
        if other is not None:
            t0 = time.monotonic()
            expect_ok(other.exchange(other.request(state=pb.StateRequest()), wait), "state", "state of another session")
            idle.append(other.received_at - t0)
        t0 = time.monotonic()
        resp = a_session.step(a)
        alone.append(time.monotonic() - t0)
        model.on_step(resp, f"step {a!r}")
        restart_if_over()
        # The step with a timeout, and the other session asked right behind it.
        st_ = pb.StepRequest(action=a.payload)
        st_.timeout.FromNanoseconds(int(step_timeout * 1e9))
        started = time.monotonic()
        a_session.send(a_session.request(step=st_))
        if other is not None:
            # Probe the other session back to back until the step is answered: the longest
            # wait is the stall (a probe served before a blocking step starts waits nothing,
            # the next one waits out the step).
            longest = 0.0
            for _ in range(_PROBES_PER_STEP):
                asked = time.monotonic()
                expect_ok(
                    other.exchange(other.request(state=pb.StateRequest()), wait), "state", "state of another session"
                )
                waited = other.received_at - asked
                if waited > bound:
                    raise Violation(
                        f"while one session's step ran (timeout {step_timeout:g} s), another session's state "
                        f"request waited {waited:.1f} s (bound {bound:g} s): the step blocks the server's event loop",
                        cause="event_loop_blocked",
                    )
                longest = max(longest, waited)
                if _answered(a_session):
                    break
        resp = a_session.recv(wait)
        took = a_session.received_at - started if isinstance(resp, pb.SessionResponse) else time.monotonic() - started
        if other is not None:
            during.append((longest, took))
        if took > step_timeout + bound:
            raise Violation(
                f"a step sent with a {step_timeout:g} s timeout was answered after {took:.1f} s "
                f"({describe(resp)}); the timeout must fire on time (bound {bound:g} s)",
                cause="event_loop_blocked",
            )
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error" and resp.error.code == 4:
            model.on_reset(a_session.reset())  # timed out: the episode is aborted
        else:
            model.on_step(resp, f"step {a!r} with a {step_timeout:g} s timeout")
            restart_if_over()
        # A 1 us timeout: a step that leaves the loop free is answered DEADLINE_EXCEEDED at once;
        # one that runs on the loop is answered with its time step, after its own time.
        t0 = time.monotonic()
        resp = a_session.step(a, timeout_s=1e-6)
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error" and resp.error.code == 4:
            timed_out += 1
            model.on_reset(a_session.reset())
        else:
            if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "step":
                late.append(a_session.received_at - t0)
            model.on_step(resp, f"step {a!r} with a 1 us timeout")
            restart_if_over()
    base = _median(idle) if idle else 0.0
    floor = max(STALL_FLOOR_S, 2 * base)
    own = _median(alone) - base  # the step's own time, beyond what any request costs
    stall = _low([w for w, _ in during]) - base
    share = _low([w / max(t, 1e-6) for w, t in during])
    figures = f"{rounds} rounds: a step alone {_ms(_median(alone))}"
    if during:
        figures += (
            f", the other session's state idle {_ms(base)} (median), its longest wait while a step ran "
            f"{_ms(stall + base)} ({share:.0%} of that step) or more in 3 rounds of 4"
        )
    if during and own >= floor and stall >= floor and share >= STALL_SHARE:
        raise Violation(
            f"the environment's step blocks the server's event loop: while a step ran (its own time "
            f"{_ms(own)}), another session's state request waited {_ms(stall)} more than with no step "
            f"running, {share:.0%} of the step it overlapped (in 3 of 4 of {len(during)} rounds; idle "
            f"{_ms(base)}; judged from {_ms(floor)} and {STALL_SHARE:.0%}): "
            "every session of the server stalls for as long as a step runs. A synchronous call "
            "(time.sleep, a blocking HTTP client, CPU-heavy work) inside `async def step`, or a slow "
            "`step` of an environment with run_in_thread = False, holds the loop; await the call, or "
            f"make step a plain `def` run on the threads ({figures})",
            cause="event_loop_blocked",
        )
    if len(late) * 2 > rounds and own >= floor:
        overdue = _low(late) - base
        if overdue >= max(floor, LATE_SHARE * own):  # answered after (most of) the step's own time
            raise Violation(
                f"steps sent with a 1 us timeout were answered with their time step, {_ms(overdue)} or more beyond "
                f"an idle request (3 in 4 of the {len(late)} of {rounds} not timed out; the step's own time "
                f"{_ms(own)}): the timeout did not fire while the step ran, so the step holds the server's event "
                "loop (a synchronous "
                f"call inside `async def step`, or a slow step with run_in_thread = False; {figures})",
                cause="event_loop_blocked",
            )
    if other is None:
        if not timed_out:
            from_loop = "" if own >= floor else " (the steps are too fast to tell a stall from noise)"
            raise CheckNotExercised(
                f"capacity 1: no second session can probe the loop, and no step outlived a 1 us timeout{from_loop}; "
                + figures
            )
        return f"capacity 1: only the timeouts were checked ({timed_out} of {rounds} 1 us steps timed out); " + figures
    note = figures + f"; {timed_out} of {rounds} 1 us steps answered DEADLINE_EXCEEDED"
    if own < floor:
        note += (
            f" (steps take {_ms(max(own, 0.0))} beyond a request: a stall of their size is below the "
            f"{_ms(floor)} the probe judges)"
        )
    return note


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
