"""What a check gets: the wire, the declared environment, the run's options, and helpers to
run Hypothesis searches that report the minimal failing example and the seed."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis import strategies as st
from hypothesis.errors import Flaky, StopTest, Unsatisfiable
from hypothesis.internal.conjecture import engine as _engine
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import tool_pb2
from openenv_conformance.declaration import Declaration
from openenv_conformance.errors import CheckFailed, CheckNotExercised, CheckSkipped, Violation
from openenv_conformance.spec import EnvSpec
from openenv_conformance.strategies import Action, ActionSpace
from openenv_conformance.targets import Target
from openenv_conformance.transport import (
    FEATURE_REASONS,
    FRAMES,
    GRPC,
    SessionLike,
    Transport,
    Wire,
    WsWire,
    expect_ok,
    open_transport,
)

__all__ = ["Context", "ContextMachine", "RunOptions"]

T = TypeVar("T")

#: A step time from which the searches are bounded by the environment's own step time.
SLOW_STEP_S = 0.005


class RunningCheck(Protocol):
    """What a context knows of the check it runs for (a :class:`~openenv_conformance.registry.Check`;
    this module is below the registry, whose checks take a context)."""

    @property
    def id(self) -> str: ...


@dataclasses.dataclass
class RunOptions:
    """Knobs of a certification run (all have defaults fit for CI).

    Attributes:
        seed: the run's seed; every Hypothesis search derives its own from it and the check id
            (None: :func:`~openenv_conformance.runner.certify` picks one and records it).
        max_examples: examples per Hypothesis search (state machines and the costlier
            searches use a fraction of it).
        timeout: seconds to wait for any one answer.
        search_budget: seconds a search may spend generating before it stops looking. For an
            environment whose steps are slow (``Context.step_time`` of 5 ms or more) it is
            bounded by its own step time: ``search_steps`` steps' worth (at least 8 s).
        search_steps: how many of the environment's steps a search's generation may spend, per
            step of its action budget (so an example of a full episode counts once per step).
        shrink_budget: seconds a failing search may spend shrinking its example.
        capacity_limit: the capacity checks skip environments declaring more sessions.
        slot_free_bound: seconds a dropped client may keep holding its session slot (at least
            ``timeout`` in a :func:`~openenv_conformance.runner.certify` run).
        concurrency: sessions the isolation check runs side by side.
        token: the bearer token for targets that require one (RFC 0003; default: the
            target's own, e.g. a docker: target's generated token, else $OPENENV_TOKEN).
        liveness_bound: seconds within which a session must be answered while another
            session's step runs, and by which a step timeout may be late.
        idle_bound: the idle-reaping check skips environments advertising a longer idle timeout
            (it waits that long).
        strict_rewards: reward-sanity findings (``rewards.trivial_max``) fail instead of warn.
        sandbox_memory_bound: bytes the processes of one call of submitted code may hold at
            once (``sandbox.memory``).
        sandbox_disk_bound: bytes a session's submitted code may hold on disk (``sandbox.disk``).
        sandbox_files_bound: files a session's submitted code may hold (``sandbox.disk``).
        sandbox_timeout: seconds a call of submitted code may take to answer (the tool's own
            limits must end it first).
        sandbox_secrets: more names (a path component) and absolute paths that submitted code
            must not read (``sandbox.answer_key``), beside the environment's package.
        grading_probes: how many of the environment's grading probes the ``grading`` level plays
            (chosen by the run's seed when it ships more; 0: every one).
        grading_timeout: seconds a graded step may take to answer (the environment's own limits
            must end a verifier that hangs first).
        declaration: the binding's declaration (``openenv certify --declaration FILE``,
            :func:`openenv_conformance.declaration.load_declaration`) that ``protocol.declaration``
            checks the server against; None: that check is skipped.
    """

    seed: int | None = None
    max_examples: int = 100
    timeout: float = 10.0
    search_budget: float = 30.0
    search_steps: int = 20
    shrink_budget: float = 20.0
    capacity_limit: int = 4096
    slot_free_bound: float = 10.0
    concurrency: int = 4
    token: str | None = None
    liveness_bound: float = 10.0
    idle_bound: float = 30.0
    strict_rewards: bool = False
    sandbox_memory_bound: int = 2 << 30
    sandbox_disk_bound: int = 1 << 30
    sandbox_files_bound: int = 100_000
    sandbox_timeout: float = 60.0
    sandbox_secrets: tuple[str, ...] = ()
    grading_probes: int = 8
    grading_timeout: float = 120.0
    declaration: Declaration | None = None


def _example_of(e: BaseException) -> str | None:
    notes = [n for n in getattr(e, "__notes__", []) if isinstance(n, str)]
    if not notes:
        return None
    lines = []
    for n in notes:
        lines.append(n.removeprefix("Failing test case: ").removeprefix("Falsifying example: "))
    text = "\n".join(line for line in lines if line != "<state machine>")
    return text.strip() or None


def _cause_of(e: BaseException | None) -> str | None:
    """The defect named by the first :class:`Violation` in ``e`` (its group, its context)."""
    seen = 0
    while e is not None and seen < 8:
        seen += 1
        cause = getattr(e, "cause", None)
        if isinstance(cause, str) and cause:
            return cause
        if isinstance(e, BaseExceptionGroup) and e.exceptions:
            found = _cause_of(e.exceptions[0])
            if found:
                return found
        e = e.__cause__ or e.__context__
    return None


def _reason_of(e: BaseException) -> str:
    if isinstance(e, Flaky) and isinstance(e, BaseExceptionGroup) and e.exceptions:
        # The first real violation on top; Hypothesis' own account ("unreliable results")
        # after it: the target answered differently when the example was replayed.
        first = _reason_of(e.exceptions[0])
        return f"{first} (seen once, not on the replay of the same example: the target is not reproducible)"
    if isinstance(e, BaseExceptionGroup):
        inner = "; ".join(_reason_of(x) for x in e.exceptions[:3])
        return f"{e.message}: {inner}" if inner else e.message
    msg = str(e).strip()
    if isinstance(e, (AssertionError, Violation)):
        return msg or type(e).__name__
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


class _BudgetSpent(BaseException):
    """Raised inside a Hypothesis test once the search budget is spent (and nothing failed),
    to end the search there. Hypothesis lets a ``BaseException`` that is not ``Exception``
    through at once, like ``KeyboardInterrupt``, but on its way out it may record the
    example as one that stopped drawing early, and a prefix replayed differently from its
    first run is reported as ``Flaky`` ("inconsistent data generation") raised while
    handling this; :meth:`Context._run` tells that apart by its ``__context__``. (A
    clock-decided ``hypothesis.reject()`` did the same with no way to tell: a false failure
    of a correct target on a loaded machine, seen once in CI.)"""


def _refused_for_capacity(resp: Any) -> bool:
    return (
        isinstance(resp, pb.SessionResponse)
        and resp.WhichOneof("kind") == "error"
        and resp.error.code == 8  # RESOURCE_EXHAUSTED
    )


class ContextMachine(RuleBasedStateMachine):
    """A Hypothesis state machine over a :class:`Context`, run by :meth:`Context.run_machine`.

    A subclass ends what it opened in :meth:`finish`; every session still open is closed
    after it, whatever happened."""

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.ctx = ctx

    def finish(self) -> None:
        """End what the machine opened (called by :meth:`teardown`)."""

    def teardown(self) -> None:
        # Called from Hypothesis' ``finally``: an exception in flight means a rule failed.
        exc = sys.exc_info()[0]
        if exc is not None and not issubclass(exc, StopTest):
            self.ctx._machine_failed = True
        try:
            self.finish()
        finally:
            self.ctx.cleanup()


class Context:
    """Shared by the checks of one run. Sessions opened through it are closed after each check.

    ``wire`` is the transport the target is certified over (gRPC or OpenEnv's JSON protocol,
    :mod:`openenv_conformance.transport`); ``features`` what it can express; ``peer_url``
    the target's other transport, if it has one (the parity check opens it as :attr:`peer`).
    """

    def __init__(
        self,
        wire: Transport,
        info: pb.EnvironmentInfo,
        options: RunOptions,
        target: Target | None = None,
        *,
        peer_url: str | None = None,
    ) -> None:
        self.wire = wire
        self.info = info
        self.options = options
        self.target = target
        self.peer_url = peer_url
        self.token: str | None = getattr(wire, "token", None)
        self._peer: Transport | None = None
        self._peer_info: pb.EnvironmentInfo | None = None
        self.spec = EnvSpec(info)
        self.check: RunningCheck | None = None  # a registry.Check, set by the runner
        self._tools: list[tool_pb2.Tool] | None = None
        self._actions: ActionSpace | None = None
        self._accepted: list[Action] | None = None
        self._step_times: list[float] = []  # round trips of the accepted steps of accepted_actions()
        self.examples_run = 0  # examples the current check's searches completed
        self._machine_failed = False  # a rule of the state machine being run failed

    @property
    def features(self) -> frozenset[str]:
        """What the transport can express (:mod:`openenv_conformance.transport`)."""
        return self.wire.features

    @property
    def transport(self) -> str:
        """``grpc`` or ``http``: the transport the target is certified over."""
        return self.wire.kind

    def grpc_wire(self) -> Wire:
        """The gRPC transport (for a check that requires ``grpc``: unary calls, reflection)."""
        if not isinstance(self.wire, Wire):
            raise CheckSkipped(FEATURE_REASONS[GRPC])
        return self.wire

    def http_wire(self) -> WsWire:
        """The HTTP/WebSocket transport (for a check that requires ``frames``: documents, raw frames)."""
        if not isinstance(self.wire, WsWire):
            raise CheckSkipped(FEATURE_REASONS[FRAMES])
        return self.wire

    def peer(self) -> tuple[Transport, pb.EnvironmentInfo] | None:
        """The target's other transport and the info it reports (opened on first use, once
        it answers); None when the target has one transport."""
        if self.peer_url is None:
            return None
        if self._peer is None:
            self._peer = open_transport(self.peer_url, timeout=self.options.timeout, token=self.token)
            self._peer_info = self._peer.get_info()
        assert self._peer_info is not None
        return self._peer, self._peer_info

    def close(self) -> None:
        """Close the transports (the peer's, then the main one)."""
        if self._peer is not None:
            self._peer.close()
            self._peer = None
        self.wire.close()

    # -- sessions

    def session(self, *, handshake: bool = True, channel: Any = None, **kw: Any) -> SessionLike:
        """A new session, handshaken (which must succeed) unless ``handshake`` is False."""
        s = self.wire.session(channel)
        if handshake:
            if self.capacity == 1:  # the slot of a session just ended may still be being freed
                deadline = time.monotonic() + self.options.slot_free_bound
                while True:
                    resp = s.handshake(**kw)
                    if s.opened or not _refused_for_capacity(resp) or time.monotonic() > deadline:
                        break
                    s.cancel()
                    time.sleep(0.1)
                    s = self.wire.session(channel)
                expect_ok(resp, "handshake", "handshake")
            else:
                s.open(**kw)
        return s

    def episode(self, seed: int | None = None, episode_id: str = "") -> tuple[SessionLike, pb.TimeStep]:
        """A new session with an episode started: (session, the reset's time step)."""
        s = self.session()
        ts = expect_ok(s.reset(seed=seed, episode_id=episode_id), "reset", "reset").time_step
        return s, ts

    @property
    def capacity(self) -> int:
        """How many sessions the target serves at once (1 when sessions cannot run side by side)."""
        caps = self.spec.caps
        return 1 if not caps.concurrent_sessions else max(1, int(caps.max_sessions) or 1)

    def next_session(self, previous: SessionLike | None = None, *, channel: Any = None) -> SessionLike:
        """A new handshaken session after ``previous`` is ended (politely): the way a check
        that needs a second session works with a capacity-1 environment. A handshake refused
        with RESOURCE_EXHAUSTED is retried for ``slot_free_bound`` seconds (the previous
        session's slot is freed asynchronously)."""
        if previous is not None:
            previous.shutdown(timeout=min(3.0, self.options.timeout))
        deadline = time.monotonic() + self.options.slot_free_bound
        while True:
            s = self.wire.session(channel)
            resp = s.handshake()
            if s.opened:
                return s
            s.cancel()
            if time.monotonic() > deadline:
                expect_ok(resp, "handshake", "handshake of a new session after the previous one closed")
            time.sleep(0.1)

    def fresh_session_works(self, after: str) -> None:
        """Health is SERVING and a new session handshakes, resets, steps an accepted action,
        reads its state and closes cleanly (the server survived ``after``)."""
        status = self.wire.health("")
        if status != "SERVING":
            raise Violation(f"after {after}, health is {status}, expected SERVING")
        # Slots of dropped clients are freed asynchronously: retry a refused handshake a while.
        deadline = time.monotonic() + self.options.slot_free_bound
        while True:
            s = self.wire.session()
            resp = s.handshake()
            if s.opened:
                break
            s.cancel()
            if time.monotonic() > deadline:
                expect_ok(resp, "handshake", f"handshake of a fresh session after {after}")
            time.sleep(0.1)
        with s:
            if self.spec.sim:
                expect_ok(s.reset(), "reset", f"reset in a fresh session after {after}")
                if self.actions.valid() is not None and self._accepted:
                    a = self._accepted[0]
                    expect_ok(s.step(a), "step", f"step {a!r} in a fresh session after {after}")
                expect_ok(s.state(), "state", f"state in a fresh session after {after}")
            elif self.spec.caps.tools:
                expect_ok(s.list_tools(), "list_tools", f"list_tools in a fresh session after {after}")
            expect_ok(s.close(), "close", f"close in a fresh session after {after}")

    def cleanup(self) -> None:
        """End every session still open (politely, then abruptly)."""
        for wire in (self.wire, self._peer):
            for s in list(wire.sessions if wire is not None else ()):
                s.shutdown(timeout=min(3.0, self.options.timeout))

    # -- what the environment declares

    @property
    def tools(self) -> list[tool_pb2.Tool]:
        """The advertised tools (from one list_tools call; [] without the tools capability)."""
        if self._tools is None:
            self._tools = []
            if self.spec.caps.tools:
                with self.session() as s:
                    resp = s.list_tools()
                    if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "list_tools":
                        self._tools = list(resp.list_tools.tools)
        return self._tools

    @property
    def actions(self) -> ActionSpace:
        if self._actions is None:
            self._actions = ActionSpace(self.spec, self.tools, json_actions=FRAMES in self.features)
        return self._actions

    def require_sim(self) -> None:
        """Skip unless reset/step/state are served."""
        if not self.spec.sim:
            raise CheckSkipped(
                "the server runs in tools-only mode (Capabilities.tools_only): reset, step and state are not served"
            )

    def require_actions(self) -> st.SearchStrategy[Action]:
        """The valid-action strategy; skip when there is none."""
        self.require_sim()
        v = self.actions.valid()
        if v is None:
            raise CheckSkipped(
                "the environment declares no example actions and its action type cannot be "
                "generated (" + (self.spec.action.class_error or self.spec.action.kind_name) + ")"
            )
        return v

    def accepted_actions(self, n: int = 3) -> list[Action]:
        """Up to ``n`` actions the environment accepted in a fresh episode: the declared
        examples, else generated ones probed one by one."""
        if self._accepted is None:
            valid = self.require_actions()
            candidates = list(self.actions.examples) or self.sample(valid, 30)
            accepted: list[Action] = []
            s, _ = self.episode()
            with s:
                for a in candidates:
                    t0 = time.monotonic()
                    r = s.step(a)
                    if isinstance(r, pb.SessionResponse) and r.WhichOneof("kind") == "step":
                        self._step_times.append(time.monotonic() - t0)
                        accepted.append(a)
                        if r.step.time_step.terminated or r.step.time_step.truncated:
                            expect_ok(s.reset(), "reset", "reset")
                    if len(accepted) >= 8:
                        break
            self._accepted = accepted
        if not self._accepted:
            raise CheckSkipped("no declared or generated action was accepted in a fresh episode")
        return self._accepted[:n]

    def step_time(self) -> float:
        """The environment's own step time as this run saw it: the median round trip of the
        accepted steps of :meth:`accepted_actions` (seconds; 0 before any). Checks whose cost
        grows with the step time size their work by it."""
        if not self._step_times:
            return 0.0
        ordered = sorted(self._step_times)
        return ordered[len(ordered) // 2]

    def search_seconds(self) -> float:
        """How long a search may generate: ``search_budget``, or for an environment whose steps
        are slow, ``search_steps`` episodes' worth of its own step time (at least 8 s): a
        30 ms step no longer makes every search run to the 30 s budget."""
        step = self.step_time()
        if step < SLOW_STEP_S:
            return self.options.search_budget
        return min(self.options.search_budget, max(8.0, self.options.search_steps * self.spec.budget * step))

    # -- Hypothesis

    def seed_for(self, salt: str = "") -> int:
        key = f"{self.options.seed}:{self.check.id if self.check else ''}:{salt}"
        return zlib.crc32(key.encode())

    def settings(self, max_examples: int | None = None, **kw: Any) -> hypothesis.settings:
        return hypothesis.settings(
            max_examples=max(1, max_examples or self.options.max_examples),
            deadline=None,
            database=None,
            derandomize=False,
            print_blob=False,
            report_multiple_bugs=False,
            verbosity=Verbosity.normal,
            suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            **kw,
        )

    @contextlib.contextmanager
    def _bounded_shrinking(self) -> Iterator[None]:
        saved = _engine.MAX_SHRINKING_SECONDS  # documented as monkeypatchable in Hypothesis
        _engine.MAX_SHRINKING_SECONDS = int(max(1, self.options.shrink_budget))
        try:
            yield
        finally:
            _engine.MAX_SHRINKING_SECONDS = saved

    def search(
        self, body: Callable[..., None], *, max_examples: int | None = None, **strategies: st.SearchStrategy[Any]
    ) -> None:
        """Run ``body(**drawn)`` on examples of ``strategies``; a failure is shrunk to a
        minimal example and raised as :class:`CheckFailed`. Generation stops after the
        search budget; shrinking after the shrink budget. Every session still open is
        closed after each example, so the body opens the sessions it uses."""
        failed = [False]
        ran = [0]
        deadline = time.monotonic() + self.search_seconds()

        def prop(**kw: Any) -> None:
            # At least one example always runs: a search whose budget a loaded machine spent
            # before it started has observed nothing, and must not pass on nothing.
            if not failed[0] and ran[0] and time.monotonic() > deadline:
                raise _BudgetSpent
            ran[0] += 1
            self.examples_run += 1
            try:
                body(**kw)
            except BaseException:
                failed[0] = True
                raise
            finally:
                self.cleanup()

        prop.__name__ = prop.__qualname__ = body.__name__
        test = self.settings(max_examples)(hypothesis.given(**strategies)(prop))
        hypothesis.seed(self.seed_for(body.__name__))(test)
        self._run(test)

    def run_machine(self, machine: type[ContextMachine], *, max_examples: int | None = None, steps: int = 30) -> None:
        """Run a Hypothesis state machine built with this context; a failure is shrunk to a
        minimal sequence of rules and raised as :class:`CheckFailed`."""
        deadline = time.monotonic() + self.search_seconds()
        self._machine_failed = False
        ran = [0]

        def factory() -> ContextMachine:
            if not self._machine_failed and ran[0] and time.monotonic() > deadline:
                raise _BudgetSpent  # (after one run at least, as in search)
            ran[0] += 1
            self.examples_run += 1
            return machine(self)

        factory.__name__ = factory.__qualname__ = machine.__name__
        hypothesis.seed(self.seed_for(machine.__name__))(factory)
        settings = self.settings(max_examples, stateful_step_count=steps)
        # Hypothesis annotates the factory as a class; it documents "a class or a function".
        self._run(lambda: run_state_machine_as_test(factory, settings=settings))  # type: ignore[arg-type]

    def _run(self, fn: Callable[[], None]) -> None:
        with self._bounded_shrinking():
            try:
                fn()
            except (Unsatisfiable, _BudgetSpent):
                return  # the search budget ran out (before any failure): nothing was found
            except Flaky as e:
                if isinstance(e.__context__, _BudgetSpent):
                    return  # Hypothesis' account of the run that the spent budget ended
                raise CheckFailed(_reason_of(e), _example_of(e), cause=_cause_of(e)) from e
            except (CheckSkipped, CheckFailed, CheckNotExercised):
                raise
            except Exception as e:
                raise CheckFailed(_reason_of(e), _example_of(e), cause=_cause_of(e)) from e

    def sample(self, strategy: st.SearchStrategy[T], n: int) -> list[T]:
        """``n`` values drawn reproducibly (from the run's seed) from ``strategy``."""
        out: list[T] = []

        def collect(x: T) -> None:
            out.append(x)

        test = hypothesis.settings(
            max_examples=n,
            database=None,
            deadline=None,
            phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck),
        )(hypothesis.given(strategy)(collect))
        hypothesis.seed(self.seed_for("sample"))(test)
        test()
        return out[:n]
