"""Level ``lifecycle``: the session state machine over reset, step, state and close."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import grpc
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import payload_pb2
from openenv.values import from_struct
from openenv_conformance.canonical import canonical, diff
from openenv_conformance.context import Context, ContextMachine
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, Violation
from openenv_conformance.model import HEX_ID, EpisodeModel
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action, json_payload
from openenv_conformance.transport import (
    EPISODE_FIELDS,
    GRPC,
    SessionLike,
    StreamEnd,
    WsSession,
    describe,
    expect_error,
    expect_ok,
    expect_response,
)

_SPEC = "docs/protocol.md"

_client_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=24)


def lifecycle_machine(valid: st.SearchStrategy[Action]) -> type[ContextMachine]:
    """A state machine over one session, its step rule drawing from ``valid``."""

    class LifecycleMachine(ContextMachine):
        """One session driven by random reset/step/state/close (and tool side calls), checked
        against :class:`EpisodeModel` after every answer."""

        def __init__(self, ctx: Context) -> None:
            super().__init__(ctx)
            self.session = ctx.session()
            self.model = EpisodeModel(ctx.spec)
            self.attempts = 0  # steps sent in this episode (bounded by the action budget)

        def finish(self) -> None:
            self.session.shutdown()

        def _verify_state(self, what: str) -> None:
            self.model.on_state(self.session.state(), f"state after {what}")

        @rule(seed=st.none() | st.integers(0, 2**32 - 1), episode_id=st.none() | _client_ids)
        def reset(self, seed: int | None, episode_id: str | None) -> None:
            self.model.on_reset(self.session.reset(seed=seed, episode_id=episode_id or ""), episode_id or "")
            self.attempts = 0

        @precondition(lambda self: self.attempts < self.ctx.spec.budget)
        @rule(action=valid)
        def step(self, action: Action) -> None:
            self.attempts += 1
            before = self.model.status
            ts = self.model.on_step(self.session.step(action), f"step {action!r}")
            if ts is None:  # refused: nothing may have changed
                self._verify_state(f"a refused step (episode status {before})")

        @rule()
        def state(self) -> None:
            self._verify_state("the previous requests")

        @precondition(lambda self: self.ctx.spec.caps.tools)
        @rule()
        def list_tools(self) -> None:
            expect_ok(self.session.list_tools(), "list_tools", "list_tools")
            self._verify_state("list_tools (a side call changes nothing)")

        @rule()
        def close_and_reopen(self) -> None:
            resp = self.session.close()
            expect_ok(resp, "close", "close")
            end, extra = self.session.wait_end()
            if extra:
                raise Violation(f"the server answered after CloseResponse: {describe(extra[0])}")
            if end.code != grpc.StatusCode.OK:
                raise Violation(f"after close the {end}; expected status OK")
            self.session = self.ctx.session()
            self.model = EpisodeModel(self.ctx.spec)
            self.attempts = 0

    return LifecycleMachine


@check(
    "lifecycle.state_machine",
    "Random sequences of reset/step/state/close keep episode_id, step_count and the episode status exactly as "
    "the session state machine says (Hypothesis state machine; refused steps change nothing)",
    f"{_SPEC} §3 (state machine, §3.4 reset, §3.5 step, §3.6 state, §3.7 close)",
    requires=(EPISODE_FIELDS,),
)
def state_machine(ctx: Context) -> None:
    valid = ctx.require_actions()
    ctx.run_machine(lifecycle_machine(valid), max_examples=max(5, ctx.options.max_examples // 2), steps=30)


@check(
    "lifecycle.step_before_reset",
    "A step before any reset is FAILED_PRECONDITION (not fatal) and changes nothing",
    f"{_SPEC} §3.5; error table: FAILED_PRECONDITION (step before reset)",
    requires=(EPISODE_FIELDS,),
)
def step_before_reset(ctx: Context) -> str | None:
    action = ctx.accepted_actions(1)[0]
    s = ctx.session()
    model = EpisodeModel(ctx.spec)
    model.on_state(s.state(), "state before any reset")
    resp = s.step(action)
    if ctx.spec.caps.auto_reset and isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "step":
        return "the environment auto-resets on a step before reset"
    expect_error(resp, "FAILED_PRECONDITION", f"step {action!r} before any reset", fatal=False)
    model.on_state(s.state(), "state after a step before reset")
    return None


def _run_episode(
    ctx: Context,
    s: SessionLike,
    model: EpisodeModel,
    actions: list[Action],
    *,
    cycle: bool = False,
    limit: int | None = None,
) -> int:
    """Step ``actions`` (cycled up to ``limit`` when ``cycle``) until the episode ends; the
    number of accepted steps."""
    n = limit if limit is not None else len(actions)
    accepted = 0
    for i in range(n):
        if model.ended:
            break
        a = actions[i % len(actions)] if cycle else actions[i]
        ts = model.on_step(s.step(a), f"step {a!r}")
        if ts is not None:
            accepted += 1
    return accepted


@check(
    "lifecycle.step_count",
    "step_count is 0 after reset and grows by exactly 1 per accepted step, in time steps and in state; "
    "max_episode_steps truncates",
    f"{_SPEC} §3.4, §3.5, §3.6",
    requires=(EPISODE_FIELDS,),
)
def step_count(ctx: Context) -> None:
    actions = ctx.accepted_actions(4)
    s = ctx.session()
    model = EpisodeModel(ctx.spec)
    for _ in range(2):
        model.on_reset(s.reset())
        model.on_state(s.state(), "state after reset")
        limit = ctx.spec.budget
        if ctx.spec.max_episode_steps is not None:
            limit = max(limit, min(ctx.spec.max_episode_steps, 4 * ctx.spec.budget))
        for i in range(limit):
            if model.ended:
                break
            a = actions[i % len(actions)]
            model.on_step(s.step(a), f"step {a!r}")
            model.on_state(s.state(), f"state after {model.step_count} steps")
    if model.step_count == 0:
        raise CheckNotExercised("no step was accepted, so step counting could not be observed")


@check(
    "lifecycle.episode_ids",
    "Every reset starts a new episode id (a uuid4 in hex when the client gives none) and honours a "
    "client-supplied one; time steps and state carry the current id",
    f"{_SPEC} §3.4",
    requires=(EPISODE_FIELDS,),
)
def episode_ids(ctx: Context) -> None:
    actions = ctx.accepted_actions(1)
    s = ctx.session()
    model = EpisodeModel(ctx.spec)
    seen = []
    for requested in ("", "", "conformance-episode-1", "", "conformance-episode-2"):
        ts = model.on_reset(s.reset(episode_id=requested), requested)
        seen.append(ts.episode_id)
        model.on_state(s.state(), f"state after reset(episode_id={requested!r})")
        _run_episode(ctx, s, model, actions, cycle=True, limit=2)
        model.on_state(s.state(), "state after steps")
    generated = [i for i, r in zip(seen, ("", "", "x", "", "x"), strict=True) if not r]
    if len(set(generated)) != len(generated) or not all(HEX_ID.fullmatch(i) for i in generated):
        raise Violation(f"server-chosen episode ids are not fresh uuid4 hex strings: {generated}")


@check(
    "lifecycle.step_after_end",
    "Once an episode has terminated or truncated, a step is FAILED_PRECONDITION (not fatal) and changes "
    "nothing, unless the environment declares auto_reset",
    f"{_SPEC} §3.5; error table: FAILED_PRECONDITION (step after the episode ended)",
    requires=(EPISODE_FIELDS,),
)
def step_after_end(ctx: Context) -> None:
    valid = ctx.require_actions()
    ended = [0]

    def end_then_step(seed: int, actions: list[Action], after: Action) -> None:
        s = ctx.session()
        model = EpisodeModel(ctx.spec)
        model.on_reset(s.reset(seed=seed))
        _run_episode(ctx, s, model, actions)
        if not model.ended:
            return
        ended[0] += 1
        model.on_step(s.step(after), f"step {after!r}")
        model.on_state(s.state(), "state after a step after the end")

    limit = ctx.spec.budget
    ctx.search(end_then_step, seed=st.integers(0, 2**32 - 1), actions=st.lists(valid, max_size=limit), after=valid)
    # No generated episode ended: walk one episode to max_episode_steps, if the environment's
    # action budget allows it (no declared budget: up to 256 steps).
    allowed = int(ctx.spec.caps.action_budget) or 256
    if not ended[0] and ctx.spec.max_episode_steps is not None and ctx.spec.max_episode_steps <= allowed:
        actions = ctx.accepted_actions(4)
        s = ctx.session()
        model = EpisodeModel(ctx.spec)
        model.on_reset(s.reset())
        _run_episode(ctx, s, model, actions, cycle=True, limit=ctx.spec.max_episode_steps)
        if model.ended:
            ended[0] += 1
            model.on_step(s.step(actions[0]), f"step {actions[0]!r}")
            model.on_state(s.state(), "state after a step after the end")
    if not ended[0]:
        raise CheckNotExercised(
            f"no generated episode ended within the action budget ({limit} steps)"
            + (
                f", nor a walk of {ctx.spec.max_episode_steps} steps"
                if ctx.spec.max_episode_steps is not None and ctx.spec.max_episode_steps <= allowed
                else ""
            )
            + ": a step after the end was never sent"
        )


@check(
    "lifecycle.state_never_fails",
    "state answers in every episode status: before reset, while running, after refused requests, after the end",
    f"{_SPEC} §3.6",
    requires=(EPISODE_FIELDS,),
)
def state_never_fails(ctx: Context) -> None:
    ctx.require_sim()
    s = ctx.session()
    model = EpisodeModel(ctx.spec)
    model.on_state(s.state(), "state before reset")
    if GRPC in ctx.features:
        expect_error(s.exchange(s.request()), "INVALID_ARGUMENT", "a request with no kind")
        model.on_state(s.state(), "state after an INVALID_ARGUMENT request")
        s.handshake()
        model.on_state(s.state(), "state after a refused second handshake")
    elif isinstance(s, WsSession):  # OpenEnv's frames: an unknown type is UNKNOWN_TYPE, no data VALIDATION_ERROR
        expect_error(
            s.frame({"type": "conformance.no_such_type"}), "UNIMPLEMENTED", "a frame of an unknown type", fatal=False
        )
        model.on_state(s.state(), "state after a frame of an unknown type")
        expect_error(s.frame({"type": "step"}), "INVALID_ARGUMENT", "a step frame without data", fatal=False)
        model.on_state(s.state(), "state after a step frame without data")
    valid = ctx.actions.valid()
    if valid is None:
        model.on_reset(s.reset())
        model.on_state(s.state(), "state after reset")
        return
    actions = ctx.accepted_actions(4)
    model.on_step(s.step(actions[0]), f"step {actions[0]!r}")
    model.on_state(s.state(), "state after a step before reset")
    model.on_reset(s.reset(seed=1))
    model.on_state(s.state(), "state after reset")
    bad = ctx.actions.invalid()
    if bad is not None:
        for a in ctx.sample(bad, 3):
            model.on_step(s.step(a), f"invalid step {a!r}")
            model.on_state(s.state(), f"state after the invalid step {a!r}")
    for i in range(ctx.spec.budget):
        if model.ended:
            break
        model.on_step(s.step(actions[i % len(actions)]), "step")
        model.on_state(s.state(), f"state after {model.step_count} steps")
    if model.ended:
        model.on_step(s.step(actions[0]), f"step {actions[0]!r}")
        model.on_state(s.state(), "state after a step after the end")


@check(
    "lifecycle.close",
    "close is answered with CloseResponse under its id, then the stream ends with status OK; later requests "
    "are never answered",
    f"{_SPEC} §3.7",
    requires=(GRPC,),
    why=(
        "gRPC only: OpenEnv's close frame has no reply (the server closes the socket; "
        "lifecycle.state_machine checks that over HTTP)"
    ),
)
def close(ctx: Context) -> None:
    for started, late in ((False, False), (True, False), (True, True)):
        s = ctx.session()
        if started and ctx.spec.sim:
            expect_ok(s.reset(), "reset", "reset")
        s.send(s.request(request_id=4242, close=pb.CloseRequest()))
        if late:  # pipelined behind the close: must never be answered
            s.send(pb.SessionRequest(request_id=4243, state=pb.StateRequest()))
        resp = expect_response(s.recv(), "close", "close")
        if resp.request_id != 4242:
            raise Violation(f"CloseResponse carries request_id {resp.request_id}, not 4242")
        item = s.recv()
        if not isinstance(item, StreamEnd):
            raise Violation(f"a request sent after close was answered: {describe(item)}")
        # With a request still in flight the client library may itself report the end as
        # INTERNAL (a write racing the end of the call); the status is checked without one.
        if not late and item.code != grpc.StatusCode.OK:
            raise Violation(f"after close the {item}; expected status OK")


@check(
    "lifecycle.tools_only",
    "In tools-only mode reset, step and state answer UNIMPLEMENTED (not fatal)",
    f"{_SPEC} §3.2; error table: UNIMPLEMENTED",
)
def tools_only(ctx: Context) -> None:
    if ctx.spec.sim:
        raise CheckSkipped("the server is not in tools-only mode")
    s = ctx.session()
    expect_error(s.reset(), "UNIMPLEMENTED", "reset in tools-only mode", fatal=False)
    expect_error(s.state(), "UNIMPLEMENTED", "state in tools-only mode", fatal=False)
    expect_ok(s.list_tools(), "list_tools", "list_tools in tools-only mode")


# --------------------------------------------------------------------------- RFC 0007


def _state_payload_ok(ctx: Context, st: pb.StateResponse, what: str) -> None:
    """The state payload is a valid value of the declared state type (or unset)."""
    for p in ctx.spec.state.problems(st.state, allow_empty=True):
        raise Violation(f"{what}: {p}")


@check(
    "lifecycle.state_before_reset",
    "state before the first reset answers episode_id '', step_count 0, status NOT_STARTED and a state payload "
    "that is unset or a valid value of the declared state type",
    f"{_SPEC} §3.6 (state before the first reset)",
    requires=(EPISODE_FIELDS,),
)
def state_before_reset(ctx: Context) -> None:
    ctx.require_sim()
    for _ in range(2):  # a fresh session twice: the value must not depend on what ran before
        s = ctx.session()
        st = EpisodeModel(ctx.spec).on_state(s.state(), "state before any reset")
        _state_payload_ok(ctx, st, "state before any reset")
        s.shutdown()


def _without_ids(t: list[dict]) -> list[dict]:
    return [{k: v for k, v in x.items() if k != "episode_id"} for x in t]


@check(
    "lifecycle.state_read_only",
    "state is read-only: state requests interleaved anywhere in a seeded episode leave its observations, "
    "rewards and flags unchanged (compared with the same seed and actions without them), and every state "
    "payload, in every episode status, is a valid value of the declared state type",
    f"{_SPEC} §3.6 (state is read-only)",
    requires=(EPISODE_FIELDS,),
)
def state_read_only(ctx: Context) -> str | None:
    valid = ctx.require_actions()
    deterministic = ctx.spec.caps.deterministic
    tol = ctx.spec.tolerance

    def compare(seed: int, actions: list[Action], reads: list[int]) -> None:
        s = ctx.session()
        model = EpisodeModel(ctx.spec)

        def read(what: str) -> None:
            _state_payload_ok(ctx, model.on_state(s.state(), what), what)

        eid = "conformance-state-read-only"  # the same id both times: only the state requests differ

        def without_reads() -> list[dict]:
            out = [canonical(s.reset(seed=seed, episode_id=eid), ctx.spec)]
            for a in actions:
                if out[-1].get("terminated") or out[-1].get("truncated") or "stream_end" in out[-1]:
                    break  # a refused step (an error) does not end the episode
                out.append(canonical(s.step(a), ctx.spec))
            return out

        plain = without_reads()
        # The same episode again, with 0-2 state requests before the reset's effects are read and
        # after each step (how many: drawn), each checked against the state machine and the type.
        model.on_reset(s.reset(seed=seed, episode_id=eid), eid)
        observed: list[dict] = []
        st = model.on_state(s.state(), "state after the reset")
        _state_payload_ok(ctx, st, "state after the reset")
        for i, a in enumerate(actions):
            if model.ended:
                break
            for _ in range(reads[i % len(reads)] if reads else 1):
                read(f"state before step {i + 1}")
            resp = s.step(a)
            observed.append(canonical(resp, ctx.spec))
            before = model.status
            ts = model.on_step(resp, f"step {a!r}")
            for _ in range(reads[(i + 1) % len(reads)] if reads else 1):
                read(f"state after step {i + 1} ({'refused' if ts is None else 'accepted'}, was {before})")
        if model.ended:
            read(f"state after the end ({model.status})")
        if deterministic:
            with_reads = plain[:1] + observed
            n = min(len(plain), len(with_reads))
            d = diff(_without_ids(plain[1:n]), _without_ids(with_reads[1:n]), tol)
            if d is None and len(plain) != len(with_reads):
                d = f"the episode lasted {len(plain) - 1} steps without state requests, {len(with_reads) - 1} with"
            if d:
                # Before blaming the state requests: does the episode repeat without them?
                again = without_reads()
                if diff(_without_ids(plain[1:]), _without_ids(again[1:]), tol) or len(again) != len(plain):
                    raise Violation(
                        f"seed {seed}: the same seed and actions gave different episodes even without state "
                        f"requests (with them it differed at {d}): the environment is not deterministic, "
                        "which determinism.same_seed judges; state's read-only rule could not be compared",
                        cause="nondeterministic",
                    )
                raise Violation(
                    f"seed {seed}: state requests changed the episode: it differs at {d} from the same seed "
                    "and actions without state requests (which repeat exactly)"
                )

    ctx.search(
        compare,
        seed=st.integers(0, 2**32 - 1),
        actions=st.lists(valid, min_size=1, max_size=ctx.spec.budget),
        reads=st.lists(st.integers(0, 2), min_size=1, max_size=4),
    )
    if not deterministic:
        return "the environment is not deterministic: state payloads were validated, episodes were not compared"
    return None


#: Generated actions the timeout search tries after the declared examples.
_TIMEOUT_CANDIDATES = 24
#: The test hook an environment may offer the timeout search: ``EnvironmentInfo.metadata``
#: ``{"openenv.certify": {"slow_action": VALUE}}``, the JSON value of an action (of a JSON action
#: type) whose step takes long enough to outlive a timeout. It is tried first.
SLOW_ACTION_KEY = ("openenv.certify", "slow_action")


def _slow_action_hook(ctx: Context) -> list[Action]:
    """The slow action the environment offers (its metadata), as an action; [] without one."""
    meta = from_struct(ctx.info.metadata) if ctx.info.HasField("metadata") else {}
    hook = meta.get(SLOW_ACTION_KEY[0])
    if not isinstance(hook, dict) or SLOW_ACTION_KEY[1] not in hook:
        return []
    if ctx.spec.action.kind != payload_pb2.PAYLOAD_KIND_JSON:
        return []  # only a JSON value says an action without a type registry
    value = hook[SLOW_ACTION_KEY[1]]
    return [Action(json_payload(value), f"the environment's slow_action {json.dumps(value, sort_keys=True)}")]


@check(
    "lifecycle.timeout_aborts",
    "A step answered DEADLINE_EXCEEDED (its StepRequest.timeout elapsed) is not fatal and not counted, and "
    "aborts the episode: state says ABORTED and the next step is FAILED_PRECONDITION (or auto-resets) until "
    "a reset",
    f"{_SPEC} §3.5 (DEADLINE_EXCEEDED aborts the episode); error table: DEADLINE_EXCEEDED",
    requires=(GRPC,),
    why="gRPC only: OpenEnv's step frame carries no timeout",
)
def timeout_aborts(ctx: Context) -> str:
    s = ctx.session()
    model = EpisodeModel(ctx.spec)
    # The actions to try, until a step outlives its timeout: the declared examples, then
    # generated ones (an action that is slow, e.g. one that waits for a remote call, may be
    # among them), each in the state the previous ones left the episode in.
    valid = ctx.require_actions()

    def candidates() -> Iterator[Action]:
        seen: set[str] = set()
        yield from _slow_action_hook(ctx)
        yield from ctx.actions.examples
        seen.update(repr(a) for a in ctx.actions.examples)
        for a in ctx.sample(valid, _TIMEOUT_CANDIDATES):  # drawn only when the examples were not enough
            if repr(a) not in seen:
                seen.add(repr(a))
                yield a

    # Bounded by the environment's own step time: a slow-stepping environment times out at once.
    deadline = time.monotonic() + min(ctx.options.search_budget, max(3.0, 100 * ctx.step_time()))
    provoked: list[Action] = []
    tried = 0
    answered_late: list[float] = []
    for attempt, a in enumerate(candidates()):
        if len(provoked) >= 2 or (tried and time.monotonic() > deadline):
            break
        if model.status != "RUNNING":
            model.on_reset(s.reset(seed=attempt))
        tried += 1
        t0 = time.monotonic()
        resp = s.step(a, timeout_s=1e-6)  # 1 us: a step that leaves the event loop cannot make it
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error" and resp.error.code == 4:
            provoked.append(a)
            expect_error(resp, "DEADLINE_EXCEEDED", f"step {a!r} with a 1 us timeout", fatal=False)
            model.status = "ABORTED"
            model.on_state(s.state(), f"state after step {a!r} was answered DEADLINE_EXCEEDED")
            model.on_step(s.step(a), f"step {a!r} after a timed-out step (the episode is ABORTED)")
            model.on_state(s.state(), "state after a step in an ABORTED episode")
            continue
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "step":
            answered_late.append(time.monotonic() - t0)
        model.on_step(resp, f"step {a!r} with a 1 us timeout")
    if not provoked:
        slowest = f"; the slowest was answered after {max(answered_late) * 1e3:.1f} ms" if answered_late else ""
        raise CheckNotExercised(
            f"no step outlived its timeout: {tried} actions (the {len(ctx.actions.examples)} declared examples, then "
            f"generated ones) were each sent with a 1 us timeout and answered with a time step or refused{slowest}. "
            "Steps that run on the server's event loop (run_in_thread = False, an async step that does not "
            "await) cannot be timed out; concurrency.event_loop_live judges whether they stall the server"
        )
    return (
        f"{len(provoked)} steps timed out (first: {provoked[0]!r}, after {tried} actions tried); each aborted its "
        "episode: state ABORTED, the next step refused"
    )
