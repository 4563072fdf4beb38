"""Sessions: one environment instance, its episode state machine and its lifecycle.

This module knows nothing about transports. The gRPC server (``openenv.server``) and
the HTTP side (``openenv.http``) translate wire requests into calls on :class:`Session`, obtained
from a :class:`SessionManager` that enforces capacity, reaps idle sessions and drains
on shutdown. See docs/protocol.md for the state machine.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import inspect
import logging
import math
import sys
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, Unpack

from openenv.errors import (
    DeadlineExceeded,
    EnvError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
)
from openenv.protocol import PROTOCOL_VERSION, EpisodeStatus, SessionState, StepResult
from openenv.runtime.anys import canonicalize_anys
from openenv.runtime.codec import Codec, codec_for, descriptor_set, to_struct
from openenv.runtime.environment import Environment
from openenv.runtime.grading import Grading, grading_spec, strict_breakdown, strict_result
from openenv.runtime.inline import GC_RUNS, HookTimes, InlinePolicy, run_inline, server_threshold_s
from openenv.runtime.isolation import ProcessEnv, WorkerRubric
from openenv.runtime.limits import (  # declared with the other limits; importable from here as before
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RESUME_GRACE_S,
    LimitKeywords,
    Limits,
)
from openenv.runtime.load import LoadMeter
from openenv.runtime.multiagent import MultiAgentEnvironment, multi_agent_spec
from openenv.runtime.rubrics import CREDITS_METADATA_KEY, Rubric
from openenv.runtime.snapshots import (
    FORMAT,
    apply_rubric_state,
    default_key,
    load_rubric_state,
    policy,
    rubric_state,
    seal,
    verify,
)
from openenv.runtime.tasks import TaskCatalog
from openenv.runtime.threads import EnvThreads
from openenv.runtime.tools import CallToolAction, CallToolObservation, Tool, ToolResult
from openenv.v1 import environment_pb2

log = logging.getLogger("openenv.session")
_T = TypeVar("_T")

_CLOSE_TIMEOUT_S = 30.0  # bound on waiting for a still-running call, and on close() itself
_FACTORY_TIMEOUT_S = 60.0  # bound on creating an environment (a hung constructor)

__all__ = [
    "CLIENT",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_RESUME_GRACE_S",
    "EnvironmentRuntime",
    "Session",
    "SessionManager",
    "client_host",
]

#: The network address (host only) of the client on whose behalf the current task works,
#: set by each listener for the connection it serves; "" when unknown (in-process use).
#: Sessions are counted per value for ``max_sessions_per_client`` (RFC 0003).
CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("openenv_client", default="")


def client_host(peer: str) -> str:
    """The host part of a gRPC peer string (``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``,
    ``ipv6:[::1]:5000`` -> ``::1``); a Unix socket peer is kept whole."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return peer


class EnvironmentRuntime:
    """Everything derived once per environment class: codecs, descriptor set, info.

    (``Runtime`` until 0.2; the old name still works, with a ``DeprecationWarning``.)

    ``limits`` (:class:`~openenv.runtime.limits.Limits`) are the serving limits; the keyword
    arguments are its field names and override it (the form that predates :class:`Limits`).
    ``self.limits`` is what was given, ``self.max_sessions`` and the like what applies (the
    environment class may narrow the capacity).
    """

    def __init__(
        self,
        factory: Callable[..., Environment] | type[Environment],
        *,
        limits: Limits | None = None,
        snapshot_key: bytes | None = None,
        **keywords: Unpack[LimitKeywords],
    ) -> None:
        limits = Limits.of(limits, keywords)
        self.limits = limits
        max_sessions, isolation = limits.max_sessions, limits.isolation
        if isinstance(factory, type):
            env_cls = factory
        else:  # a factory function: build one instance to learn its class
            probe = factory()
            env_cls = type(probe)
            _close_quietly(probe)
        if not (isinstance(env_cls, type) and issubclass(env_cls, Environment)):
            raise TypeError(f"{env_cls!r} is not an openenv.Environment subclass")
        env_cls.preflight()  # what this machine lacks for it: refuse to start, before any session
        self.factory = factory
        self.env_cls = env_cls
        cap = env_cls.max_sessions if max_sessions is None else max_sessions
        if not env_cls.concurrent_sessions:
            if max_sessions is not None and max_sessions > 1:
                raise ValueError(
                    f"{env_cls.__name__} declares concurrent_sessions = False; "
                    f"max_sessions must be 1, not {max_sessions}"
                )
            cap = 1
        if cap < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = cap
        # Sessions one client address may hold at once (0: no limit), so that one client
        # (a runaway script, a JSON-RPC batch) cannot take every slot (RFC 0003).
        self.max_sessions_per_client = limits.max_sessions_per_client
        self.max_num_envs = cap if limits.max_num_envs is None else min(limits.max_num_envs, cap)
        self.max_message_bytes = limits.max_message_bytes
        self.idle_timeout_s = limits.idle_timeout_s
        self.tools_only = limits.tools_only
        self.tools = env_cls.tools()
        self.action_codec: Codec = codec_for(env_cls.action_type, lenient=env_cls.lenient_actions)
        self.observation_codec: Codec = codec_for(env_cls.observation_type)
        self.state_codec: Codec = codec_for(env_cls.state_type)
        self.is_async = env_cls.__openenv_async__
        self.default_tool_step = bool(self.tools) and env_cls.step is Environment.step
        # RFC 0015: a grading environment's declaration, and the tools that grade (declared by
        # their annotations); strict feedback is enforced on their results below (Session).
        self.grading_tools = {
            name: td for name, td in self.tools.items() if grading_spec(td.descriptor.annotations) is not None
        }
        declared = env_cls.grading
        if declared is not None and not isinstance(declared, Grading):
            raise TypeError(f"{env_cls.__name__}.grading must be an openenv.Grading, got {type(declared).__name__}")
        self.grading: Grading | None = declared or (Grading() if self.grading_tools else None)
        rubric = getattr(env_cls, "rubric", None)
        if rubric is not None and not isinstance(rubric, Rubric):
            raise TypeError(f"{env_cls.__name__}.rubric must be an openenv.rubrics.Rubric, got {type(rubric).__name__}")
        self.rubric: Rubric | None = rubric
        self.isolation = isolation
        # Process isolation: every call goes to the session's worker over a pipe, from a thread.
        self.run_in_thread = env_cls.run_in_thread or isolation == "process"
        if isolation == "process":
            self.is_async = frozenset()
        # Fast sync hooks run inline, decided by their measured time (runtime.inline); never for
        # process isolation (a call is a pipe round trip) nor for classes that opt out.
        threshold = server_threshold_s(limits.inline_threshold_s)
        if threshold and env_cls.inline_threshold_s is not None:
            threshold = env_cls.inline_threshold_s
        self.inline = (
            InlinePolicy(threshold) if threshold > 0 and env_cls.run_in_thread and isolation != "process" else None
        )
        # RFC 0006: resumable sessions, snapshots (the default hooks, or the class's own).
        self.resume_grace_s = limits.resume_grace_s
        self.snapshots = bool(env_cls.snapshots) or env_cls.snapshot is not Environment.snapshot
        self.max_forks = self.max_sessions if self.snapshots else 0
        self.snapshot_key = snapshot_key or default_key()
        if self.snapshots:
            policy(env_cls)  # a malformed snapshot_globals fails here, when the server starts
        self.tasks: TaskCatalog | None = TaskCatalog.of(env_cls)  # RFC 0004
        # RFC 0012: a multi-agent environment's worlds (runtime.world); its declaration is checked here.
        self.multi_agent = multi_agent_spec(env_cls) if issubclass(env_cls, MultiAgentEnvironment) else None
        if self.multi_agent is not None:  # not offered for worlds in 1.4 (RFC 0012): not advertised either
            if isolation == "process":
                raise ValueError(f"{env_cls.__name__} is a multi-agent environment: process isolation is not offered")
            self.max_num_envs, self.resume_grace_s, self.snapshots, self.max_forks = 1, 0.0, False, 0
            self.tasks = None
        # RFC 0016: each agent's own action and view declarations, narrower than the shared ones.
        self.agent_action_codecs: dict[str, Codec] = {
            a: codec_for(t, lenient=env_cls.lenient_actions)
            for a, t in dict(getattr(env_cls, "agent_action_types", {}) or {}).items()
        }
        self.agent_observation_codecs: dict[str, Codec] = {
            a: codec_for(t) for a, t in dict(getattr(env_cls, "agent_observation_types", {}) or {}).items()
        }
        self.info = self._build_info()

    def _build_info(self) -> environment_pb2.EnvironmentInfo:
        c = self.env_cls
        info = environment_pb2.EnvironmentInfo(
            name=c.name,
            version=c.version,
            description=c.description or (c.__doc__ or "").strip().split("\n\n")[0],
            protocol_version=PROTOCOL_VERSION,
        )
        info.action.CopyFrom(self.action_codec.spec(c.example_actions))
        info.observation.CopyFrom(self.observation_codec.spec())
        info.state.CopyFrom(self.state_codec.spec())
        msgs = [
            d
            for codec in (
                self.action_codec,
                self.observation_codec,
                self.state_codec,
                *self.agent_action_codecs.values(),
                *self.agent_observation_codecs.values(),
            )
            for d in codec.message_descriptors()
        ]
        if msgs:
            info.descriptors.CopyFrom(descriptor_set(msgs))
        cap = info.capabilities
        cap.max_sessions = self.max_sessions
        cap.concurrent_sessions = c.concurrent_sessions
        cap.deterministic = c.deterministic
        cap.float_tolerance = c.float_tolerance
        cap.auto_reset = c.auto_reset
        cap.tools = bool(self.tools)
        cap.tools_only = self.tools_only
        cap.max_message_bytes = self.max_message_bytes
        if c.max_episode_steps is not None:
            cap.max_episode_steps = c.max_episode_steps
        if c.reward_range is not None:
            cap.reward_min, cap.reward_max = c.reward_range
        cap.idle_timeout.FromNanoseconds(int(self.idle_timeout_s * 1e9))
        cap.action_budget = c.action_budget
        cap.max_num_envs = self.max_num_envs if self.max_num_envs > 1 else 0
        if self.resume_grace_s:
            cap.resume_grace.FromNanoseconds(int(self.resume_grace_s * 1e9))
        cap.snapshots = self.snapshots
        cap.max_forks = self.max_forks
        cap.load_reporting = True  # every server answers GetLoad (RFC 0005)
        cap.lenient_actions = c.lenient_actions
        cap.seeded = c.seeded
        if self.grading is not None:  # RFC 0015
            levels = {"strict": environment_pb2.FEEDBACK_STRICT, "rich": environment_pb2.FEEDBACK_RICH}
            cap.grades = True
            cap.feedback = levels[self.grading.feedback]
            cap.feedback_offered.extend(levels[x] for x in self.grading.offers)
        rubric = getattr(c, "rubric", None)
        if rubric is not None and hasattr(rubric, "spec"):
            info.rubric.CopyFrom(rubric.spec())
        if c.metadata:
            to_struct(dict(c.metadata), info.metadata)
        if self.tasks is not None:
            cap.tasks = True
            info.task_splits.extend(self.tasks.split_protos())
        if self.multi_agent is not None:
            cap.multi_agent = True
            cap.world_wait_timeouts = cap.seat_events = True  # RFC 0016
            info.multi_agent.CopyFrom(self.multi_agent)
            for spec in info.multi_agent.agents:
                if spec.id in self.agent_action_codecs:
                    spec.action.CopyFrom(self.agent_action_codecs[spec.id].spec())
                if spec.id in self.agent_observation_codecs:
                    spec.observation.CopyFrom(self.agent_observation_codecs[spec.id].spec())
        # The examples' bytes the same in every process (their maps sorted): see runtime/anys.py.
        canonicalize_anys(info, {d.file.pool for d in msgs})
        return info

    def tool_descriptors(self) -> list[Tool]:
        return [t.descriptor for t in self.tools.values()]


def _close_quietly(env: Any) -> None:
    try:
        r = env.close()
        if inspect.iscoroutine(r):
            r.close()  # a coroutine we cannot await here; the probe instance held nothing yet
    except Exception:
        log.exception("closing the probe instance failed")


def _timed(took: list[Any], fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` on a worker thread; its wall and CPU time, and whether the garbage collector
    ran meanwhile, appended to ``took`` (runtime.inline)."""
    t0, c0, g0 = time.perf_counter(), time.thread_time(), GC_RUNS[0]
    try:
        return fn(*args)
    finally:
        took += (time.perf_counter() - t0, time.thread_time() - c0, GC_RUNS[0] != g0)


def _as_step_result(value: Any) -> StepResult[Any]:
    return value if isinstance(value, StepResult) else StepResult(observation=value)


def _check_reward(r: Any) -> float | None:
    if r is None:
        return None
    if isinstance(r, bool):
        return float(r)
    if isinstance(r, (int, float)):
        return float(r)
    np = sys.modules.get("numpy")  # a NumPy number exists only once NumPy is imported
    if np is not None and isinstance(r, (np.integer, np.floating)):
        return float(r)
    raise TypeError(f"reward must be a number or None, got {type(r).__name__}")


class Session:
    """One client's session: an environment instance and its episode state."""

    def __init__(
        self, manager: SessionManager, env: Environment, client_name: str, options: Mapping[str, Any] | None = None
    ) -> None:
        self.manager = manager
        self.options = dict(options or {})  # the handshake's, for forks
        self.runtime = manager.runtime
        self.env = env
        self.id = manager.token_prefix + uuid.uuid4().hex  # a worker's names it (workers.py)
        self.client_name = client_name
        self.client = CLIENT.get()  # the client's address (counted per client by the manager)
        self.episode_id = ""
        self.step_count = 0
        self.status = EpisodeStatus.NOT_STARTED
        # RFC 0015: the feedback level of the current episode (of the next one, before a reset).
        grading = self.runtime.grading
        self.feedback = grading.feedback if grading is not None else "rich"
        self.last_active = time.monotonic()
        self.busy = False
        self.closed = False
        self.env_seconds = 0.0  # time spent in requests' environment (and rubric) code (metrics)
        self._straggler: asyncio.Future[Any] | None = None  # work that outlived its timeout
        self._terminate: Callable[[EnvError], None] | None = None
        # The session's own rubric: the class's, cloned (per-session state), bound to env.
        self.rubric: Rubric | WorkerRubric | None = None
        if self.runtime.rubric is not None and isinstance(env, ProcessEnv):  # the worker holds it
            self.rubric = WorkerRubric(env, self.runtime.rubric.name)
            self._rubric_async = False
        elif self.runtime.rubric is not None:
            own = env.__dict__.get("rubric")
            self.rubric = own if isinstance(own, Rubric) else self.runtime.rubric.clone()
            self.rubric.bind(env)
            env.rubric = self.rubric
            self._rubric_async = self.rubric.is_async

    # -- plumbing

    def on_terminate(self, callback: Callable[[EnvError], None]) -> None:
        """Register how the transport ends this session's stream (idle timeout, drain)."""
        self._terminate = callback

    def terminate(self, error: EnvError) -> None:
        """Ask the transport to end the session with ``error`` (fatal)."""
        error.fatal = True
        if self._terminate is not None and not self.closed:
            self._terminate(error)

    async def _call(
        self, fn: Callable[..., Any], is_async: bool, *args: Any, timeout: float | None = None, what: str = ""
    ) -> Any:
        if self._straggler is not None:  # a timed-out call still runs: never overlap it
            await asyncio.wait({self._straggler})
            if not self._straggler.cancelled():
                self._straggler.exception()  # retrieved: its outcome was already answered (or nobody waits)
            self._straggler = None
        if is_async:
            if timeout is None:  # hot path: no task; cancelling the stream cancels the coroutine
                return await fn(*args)
            fut: asyncio.Future[Any] = asyncio.ensure_future(fn(*args))
        elif self.runtime.run_in_thread:
            policy = self.runtime.inline
            if policy is None:
                fut = self.manager.run_in_thread(functools.partial(fn, *args))
            else:  # timed: fast hooks run inline (runtime.inline)
                hook = policy.hook(what or fn.__name__)
                if hook.inline and (timeout is None or timeout >= policy.min_timeout_s):
                    return self._inline(policy, hook, fn, args, timeout, what)
                took: list[Any] = []
                fut = self.manager.run_in_thread(functools.partial(_timed, took, fn, *args))
                fut.add_done_callback(lambda _: policy.threaded(hook, *took) if took else policy.threaded(hook, None))
        else:
            return fn(*args)
        try:
            if timeout is None:
                return await asyncio.shield(fut)  # cancelling the wrapper would not stop a worker thread
            done, _ = await asyncio.wait({fut}, timeout=timeout)
        except asyncio.CancelledError:  # the stream went away mid-call: the next call (close) waits for it
            if is_async:
                fut.cancel()
            self._straggler = fut
            raise
        if not done:
            if is_async:
                fut.cancel()
            self._straggler = fut
            raise DeadlineExceeded(f"{what or fn.__name__} did not finish within {timeout:g} s")
        return fut.result()

    def _inline(
        self,
        policy: InlinePolicy,
        hook: HookTimes,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        timeout: float | None,
        what: str,
    ) -> Any:
        """One sync call on the loop's thread, timed (runtime.inline): a slow one sends the hook back
        to the threads; one that overran its timeout is answered as a threaded one would be."""
        t0, c0, g0 = time.perf_counter(), time.thread_time(), GC_RUNS[0]
        try:
            value = run_inline(fn, *args)
        finally:
            took = time.perf_counter() - t0
            policy.ran_inline(hook, took, time.thread_time() - c0, GC_RUNS[0] != g0)
        if timeout is not None and took > timeout:
            raise DeadlineExceeded(f"{what or fn.__name__} did not finish within {timeout:g} s")
        return value

    async def _guard(self, coro: Awaitable[_T]) -> _T:
        """Run one request: map environment exceptions to INTERNAL, track activity."""
        if self.closed:
            raise FailedPrecondition("session is closed")
        self.busy = True
        t0 = time.perf_counter()
        try:
            return await coro
        except EnvError:
            raise
        except asyncio.CancelledError:
            raise
        except RecursionError as e:  # a deeply nested payload (e.g. tool arguments) met a recursive validator
            raise InvalidArgument("the request is nested too deeply to be validated") from e
        except Exception as e:
            log.warning("environment %s raised in session %s", self.runtime.env_cls.__name__, self.id, exc_info=True)
            raise Internal(f"{type(e).__name__}: {e}") from e
        finally:
            self.busy = False
            self.last_active = time.monotonic()
            self.env_seconds += time.perf_counter() - t0

    def _require_sim(self, what: str) -> None:
        if self.runtime.tools_only:
            raise Unimplemented(f"{what} is not available: the server runs in tools-only mode")

    # -- requests

    async def reset(
        self, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> StepResult[Any]:
        self._require_sim("reset")
        return await self._guard(self._reset(seed, episode_id, options))

    async def _reset(
        self, seed: int | None, episode_id: str | None, options: Mapping[str, Any] | None
    ) -> StepResult[Any]:
        eid = episode_id or uuid.uuid4().hex
        opts = dict(options or {})
        grading = self.runtime.grading
        if grading is not None:  # RFC 0015: the episode's feedback level, which the environment sees too
            try:
                level = grading.level(opts)
            except ValueError as e:
                raise InvalidArgument(str(e)) from None
            opts["feedback"] = level
        fn = functools.partial(self.env.reset, seed=seed, episode_id=eid, options=opts)
        out = await self._call(fn, "reset" in self.runtime.is_async, what="reset")
        if grading is not None:
            self.feedback = level
        result = _as_step_result(out)
        result.reward = _check_reward(result.reward)
        if self.rubric is not None:
            await self._rubric_do(self.rubric.reset, "rubric reset")
        self.episode_id = eid
        self.step_count = 0
        self.status = (
            EpisodeStatus.TERMINATED
            if result.terminated
            else EpisodeStatus.TRUNCATED
            if result.truncated
            else EpisodeStatus.RUNNING
        )
        result.episode_id, result.step_count = eid, 0
        return result

    def retract_step(self, status_before: EpisodeStatus) -> None:
        """Uncount the step just accepted from ``status_before``, whose result the transport
        could not encode: it is answered INTERNAL, and a step answered with an error is not
        counted (docs/protocol.md §3.5). An auto-reset (from another status) is kept."""
        if status_before is EpisodeStatus.RUNNING and self.step_count > 0:
            self.step_count -= 1
            self.status = EpisodeStatus.RUNNING

    async def step(self, action: Any, timeout: float | None = None) -> StepResult[Any]:
        self._require_sim("step")
        started = time.monotonic()
        try:
            return await self._guard(self._step(action, timeout))
        finally:
            self.manager.load.record_step(time.monotonic() - started)

    async def _step(self, action: Any, timeout: float | None) -> StepResult[Any]:
        if self.status is not EpisodeStatus.RUNNING:
            if self.runtime.env_cls.auto_reset:  # from every status, NOT_STARTED included (§3.1, §3.5)
                return await self._reset(None, None, None)
            if self.status is EpisodeStatus.NOT_STARTED:
                raise FailedPrecondition("step before reset: call reset first")
            raise FailedPrecondition(f"the episode is over ({self.status.name.lower()}): call reset first")
        started = time.monotonic() if timeout is not None and self.rubric is not None else 0.0
        try:
            if self.runtime.default_tool_step:
                if not isinstance(action, CallToolAction):
                    raise InvalidArgument(f"expected a CallToolAction, got {type(action).__name__}")
                tool_timeout = action.timeout_s if action.timeout_s is not None else timeout
                tool_result = await self._call_tool(action.tool_name, action.arguments, tool_timeout)
                obs = CallToolObservation(action.tool_name, tool_result)
                out: Any = self.env.finish_tool_step(action, obs)
            else:
                out = await self._call(
                    self.env.step, "step" in self.runtime.is_async, action, timeout=timeout, what="step"
                )
            result = _as_step_result(out)
            result.reward = _check_reward(result.reward)
            limit = self.runtime.env_cls.max_episode_steps
            if limit is not None and self.step_count + 1 >= limit and not result.terminated:
                result.truncated = True
            if result.reward is None and self.rubric is not None:
                await self._score(action, result, timeout, started)
            if self.runtime.grading is not None and self.feedback == "strict":
                self._strict(action, result)
        except DeadlineExceeded:
            self.status = EpisodeStatus.ABORTED
            raise
        self.step_count += 1
        if result.terminated:
            self.status = EpisodeStatus.TERMINATED
        elif result.truncated:
            self.status = EpisodeStatus.TRUNCATED
        result.episode_id, result.step_count = self.episode_id, self.step_count
        return result

    def _strict(self, action: Any, result: StepResult[Any]) -> None:
        """Strict feedback (RFC 0015): a grading tool's result becomes the step's reward, the
        breakdown its root, the metadata the keys the environment declares public (and the
        runtime's trajectory credits, which are rewards)."""
        grading = self.runtime.grading
        assert grading is not None
        if result.metadata:
            keep = (*grading.public_metadata, CREDITS_METADATA_KEY)
            result.metadata = {k: v for k, v in result.metadata.items() if k in keep}
        result.reward_breakdown = strict_breakdown(result.reward_breakdown)
        if isinstance(action, CallToolAction) and self.runtime.default_tool_step:
            td = self.runtime.grading_tools.get(action.tool_name)
            obs = result.observation
            graded = td is not None and not (
                isinstance(obs, CallToolObservation) and obs.result is not None and obs.result.is_error
            )
            if td is not None and graded:
                strict = strict_result(result.reward, td.descriptor.output_schema)
                result.observation = CallToolObservation(action.tool_name, strict)

    async def _score(self, action: Any, result: StepResult[Any], timeout: float | None, started: float) -> None:
        """Fill reward and reward_breakdown from the session's rubric (within the step's
        timeout); at the end of an episode, add trajectory credits to the metadata."""
        rubric = self.rubric
        assert rubric is not None
        done = result.terminated or result.truncated
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        evaluate = rubric.evaluate if self._rubric_async and isinstance(rubric, Rubric) else rubric.evaluate_sync
        fn = functools.partial(evaluate, action, result.observation, done=done)
        score = await self._call(fn, self._rubric_async, timeout=remaining, what=f"rubric {rubric.name!r}")
        result.reward = score.score
        result.reward_breakdown = score
        if done:
            credits = score.credit_map()
            if credits:
                result.metadata = {**(result.metadata or {}), CREDITS_METADATA_KEY: credits}

    async def state(self) -> SessionState:
        self._require_sim("state")
        st = await self._guard(self._call(self.env.state, "state" in self.runtime.is_async, what="state"))
        return SessionState(self.episode_id, self.step_count, self.status, st)

    async def render(self) -> Any:
        """The environment's :meth:`~openenv.Environment.render` of its current state
        (UNIMPLEMENTED when the class has no render hook)."""
        if self.runtime.env_cls.render is Environment.render:  # the class's: self.env may be a worker's proxy
            raise Unimplemented(f"{self.runtime.env_cls.__name__} has no render hook")
        return await self._guard(self._call(self.env.render, "render" in self.runtime.is_async, what="render"))

    async def list_tools(self) -> list[Tool]:
        if not self.runtime.tools:
            raise Unimplemented(f"{self.runtime.env_cls.__name__} has no tools")
        self.last_active = time.monotonic()
        return self.runtime.tool_descriptors()

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, timeout: float | None = None
    ) -> ToolResult:
        return await self._guard(self._call_tool(name, arguments, timeout, side=True))

    async def _call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, timeout: float | None, *, side: bool = False
    ) -> ToolResult:
        tools = self.runtime.tools
        if not tools:
            raise Unimplemented(f"{self.runtime.env_cls.__name__} has no tools")
        td = tools.get(name)
        if td is None:
            raise NotFound(f"unknown tool {name!r}; known tools: {', '.join(tools)}")
        kwargs = td.validate(dict(arguments or {}))
        if side and name in self.runtime.grading_tools and self.feedback == "strict":
            # RFC 0015: grading happens once per episode, as a step, and only its reward comes back
            # (else the tool is an oracle answered as often as it is called).
            raise FailedPrecondition(
                f"{name!r} grades the episode: call it as a step (a side call of a grading tool is refused "
                "with strict feedback, docs/protocol.md §7.1)"
            )
        limit = min((t for t in (timeout, td.timeout_s) if t is not None), default=None)
        if isinstance(self.env, ProcessEnv):
            fn, is_async = functools.partial(self.env.call_tool, name, kwargs), False
        else:
            fn, is_async = functools.partial(td.fn, self.env, **kwargs), td.is_async
        try:
            value = await self._call(fn, is_async, timeout=limit, what=f"tool {name!r}")
        except EnvError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing tool is a result, as in MCP
            return ToolResult([{"type": "text", "text": f"{type(e).__name__}: {e}"}], None, True)
        return ToolResult.of(value)

    async def snapshot(self) -> environment_pb2.Snapshot:
        """The session's state, sealed (RFC 0006); UNIMPLEMENTED when the environment has none."""
        return await self._guard(self._snapshot())

    async def _snapshot(self) -> environment_pb2.Snapshot:
        rt = self.runtime
        if not rt.snapshots:
            raise Unimplemented(
                f"{rt.env_cls.__name__} does not offer snapshots (Capabilities.snapshots is false): "
                "set snapshots = True or override snapshot() and restore()"
            )
        data = await self._call(self.env.snapshot, "snapshot" in rt.is_async, what="snapshot")
        if not isinstance(data, bytes):
            raise TypeError(f"{rt.env_cls.__name__}.snapshot() must return bytes, got {type(data).__name__}")
        snap = environment_pb2.Snapshot(
            format=FORMAT,
            env_name=rt.info.name,
            env_version=rt.info.version,
            episode_id=self.episode_id,
            step_count=self.step_count,
            status=int(self.status),  # type: ignore[arg-type]  # the stubs type enums as their class
            environment=data,
            rubric=await self._rubric_state(),
        )
        return seal(rt.snapshot_key, snap)

    async def _rubric_do(self, fn: Callable[[], _T], what: str) -> _T:
        """Run a rubric operation: in the loop, or on the session's thread when the rubric is
        in a worker process (a pipe round trip must not block the server's loop)."""
        if isinstance(self.rubric, WorkerRubric):
            result: _T = await self._call(fn, False, what=what)
            return result
        return fn()

    async def _rubric_state(self) -> bytes:
        rubric = self.rubric
        if rubric is None:
            return b""
        if isinstance(rubric, WorkerRubric):
            return await self._rubric_do(rubric.state, "rubric state")
        return rubric_state(rubric, self.runtime.env_cls)

    async def restore(self, snap: environment_pb2.Snapshot) -> None:
        """Replace the session's state with a snapshot's; a refused snapshot changes nothing."""
        rt = self.runtime
        if not rt.snapshots:
            raise Unimplemented(f"{rt.env_cls.__name__} does not offer snapshots (Capabilities.snapshots is false)")
        verify(rt.snapshot_key, snap, rt.info.name, rt.info.version)
        try:
            status = EpisodeStatus(snap.status)
        except ValueError:
            raise InvalidArgument(f"the snapshot's episode status {snap.status} is not a known status") from None
        await self._guard(self._restore(snap, status))

    async def _restore(self, snap: environment_pb2.Snapshot, status: EpisodeStatus) -> None:
        # The rubric's part is read (and checked against the tree) before anything changes, so a
        # snapshot refused for it changes nothing; the default environment hook reads its own
        # part before changing anything too. Both are read by the restricted loader.
        rubric, data = self.rubric, snap.rubric
        nodes: list[dict[str, Any]] | None = None
        if isinstance(rubric, WorkerRubric) and data:
            await self._rubric_do(functools.partial(rubric.restore, data, check_only=True), "rubric check")
        elif rubric is not None and data:
            nodes = load_rubric_state(data, self.runtime.env_cls)
            apply_rubric_state(rubric, nodes, check_only=True)
        fn = functools.partial(self.env.restore, snap.environment)
        await self._call(fn, "restore" in self.runtime.is_async, what="restore")
        if isinstance(rubric, WorkerRubric):
            await self._rubric_do(functools.partial(rubric.restore, data) if data else rubric.reset, "rubric restore")
        elif rubric is not None:
            if nodes is not None:
                apply_rubric_state(rubric, nodes)
            else:
                rubric.reset()
        self.episode_id, self.step_count, self.status = snap.episode_id, snap.step_count, status

    async def close(self) -> None:
        """Close the environment instance (once) and free the slot."""
        await self.manager.release(self)


class SessionManager:
    """Owns the sessions of one server process: capacity, idle reaping, drain."""

    def __init__(self, runtime: EnvironmentRuntime, *, executor_workers: int | None = None) -> None:
        self.runtime = runtime
        self.sessions: dict[str, Session] = {}
        self.draining = False
        self.opened_total = 0
        # Threads are started on demand (never more than calls in flight), so a generous
        # bound costs nothing: every session may hold one call, and as many again may be
        # calls of closed sessions that never returned (a hung environment; a Python thread
        # cannot be killed). Beyond that, new sessions are refused at once (UNAVAILABLE)
        # instead of queueing behind hung calls (RFC 0003).
        workers = executor_workers or 2 * runtime.max_sessions + 8
        self.threads = EnvThreads(workers, "openenv-env")  # a light hand-off per call (runtime.threads)
        self.max_threads = workers
        self.calls_in_threads = 0  # calls submitted to the executor and not finished
        self._reaper: asyncio.Task[None] | None = None
        self._reserved = 0
        self._closing: set[asyncio.Future[None]] = set()  # close() calls in progress
        self.load = LoadMeter()  # step latencies and counters for GetLoad (runtime.load)
        self.per_client: collections.Counter[str] = collections.Counter()  # slots held per CLIENT
        #: What the resume and join tokens this server issues begin with: ``""`` for a server
        #: of one process; ``"w<index>."`` in a worker of several (RFC 0013, Tokens across
        #: workers), so that a sibling receiving the token knows which worker holds its session.
        self.token_prefix = ""

    @property
    def active(self) -> int:
        """Sessions holding a slot (open or being created)."""
        return len(self.sessions) + self._reserved

    @property
    def handshakes_in_progress(self) -> int:
        """Sessions whose environment instance is still being created (counted in ``active``)."""
        return self._reserved

    async def open_many(self, n: int, options: Mapping[str, Any] | None = None, client_name: str = "") -> list[Session]:
        """Create ``n`` sessions for one vectorised stream (all or none)."""
        if n > max(self.runtime.max_num_envs, 1):
            raise ResourceExhausted(
                f"num_envs {n} exceeds this server's max_num_envs {self.runtime.max_num_envs}", fatal=True
            )
        self._check_capacity(n)
        out: list[Session] = []
        try:
            for _ in range(n):
                out.append(await self.open(options, client_name))
        except BaseException:
            for s in out:
                await self.release(s)
            raise
        return out

    def run_in_thread(self, fn: Callable[[], _T]) -> asyncio.Future[_T]:
        """Run ``fn`` on the environment threads, counting it until it returns."""
        self.calls_in_threads += 1
        fut = self.threads.submit(fn)

        def done(_: Any) -> None:
            self.calls_in_threads -= 1

        fut.add_done_callback(done)
        return fut

    def _check_capacity(self, n: int) -> None:
        if self.draining:
            raise Unavailable("server is shutting down", fatal=True)
        if self.calls_in_threads + n >= self.max_threads:
            raise Unavailable(
                f"{self.calls_in_threads} environment calls are still running (some never returned); "
                "refusing new sessions until they finish",
                fatal=True,
            )
        if self.active + n > self.runtime.max_sessions:
            raise ResourceExhausted(
                f"server at capacity: {self.active}/{self.runtime.max_sessions} sessions active",
                details={"active_sessions": self.active, "max_sessions": self.runtime.max_sessions},
                fatal=True,
            )
        per_client, client = self.runtime.max_sessions_per_client, CLIENT.get()
        if per_client and client and self.per_client[client] + n > per_client:
            raise ResourceExhausted(
                f"client {client} holds {self.per_client[client]} sessions; this server allows {per_client} per client",
                details={"client_sessions": self.per_client[client], "max_sessions_per_client": per_client},
                fatal=True,
            )

    async def open(self, options: Mapping[str, Any] | None = None, client_name: str = "") -> Session:
        """Create a session: RESOURCE_EXHAUSTED at capacity, UNAVAILABLE while draining,
        INTERNAL (fatal) when the factory fails."""
        self._check_capacity(1)
        self._reserved += 1
        client = CLIENT.get()
        self.per_client[client] += 1
        created = False
        try:
            if self.runtime.isolation == "process":
                factory: Callable[[], Any] = functools.partial(ProcessEnv, self.runtime.factory, dict(options or {}))
            else:
                factory = functools.partial(self.runtime.factory, **dict(options or {}))
            try:
                if self.runtime.run_in_thread:
                    creating = self.run_in_thread(factory)
                    done, _ = await asyncio.wait({creating}, timeout=_FACTORY_TIMEOUT_S)
                    if not done:  # a hung constructor: its thread is abandoned, the handshake answered
                        raise DeadlineExceeded(f"the environment was not created within {_FACTORY_TIMEOUT_S:g} s")
                    env = creating.result()
                else:
                    env = factory()
            except EnvError as e:
                e.fatal = True
                raise
            except Exception as e:
                log.warning("environment factory failed", exc_info=True)
                raise Internal(f"environment factory failed: {type(e).__name__}: {e}", fatal=True) from e
            session = Session(self, env, client_name, options)
            self.sessions[session.id] = session
            self.opened_total += 1
            created = True
            return session
        finally:
            self._reserved -= 1
            if not created:
                self._client_left(client)

    def _client_left(self, client: str) -> None:
        self.per_client[client] -= 1
        if self.per_client[client] <= 0:
            del self.per_client[client]

    async def release(self, session: Session) -> None:
        """End a session: close its environment exactly once and free its slot."""
        if session.closed:
            return
        session.closed = True
        if self.sessions.pop(session.id, None) is not None:
            self._client_left(session.client)
        # Shielded: the transport's task may be cancelled meanwhile (the client cancels its
        # call right after CloseResponse, or disconnects); close() must still run, once.
        closing = asyncio.ensure_future(self._close_env(session))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        await asyncio.shield(closing)

    async def _close_env(self, session: Session) -> None:
        straggler = session._straggler  # a call the stream stopped waiting for may still run
        if straggler is not None and not straggler.done():
            await asyncio.wait({straggler}, timeout=_CLOSE_TIMEOUT_S)
            if not straggler.done():
                log.warning("session %s: a call still runs after %g s; closing anyway", session.id, _CLOSE_TIMEOUT_S)
                session._straggler = None
        try:
            await session._call(
                session.env.close, "close" in self.runtime.is_async, what="close", timeout=_CLOSE_TIMEOUT_S
            )
        except Exception:
            log.warning("closing session %s failed", session.id, exc_info=True)
        if session.rubric is not None:
            try:
                await asyncio.wait_for(session.rubric.aclose(), 30.0)
            except Exception:
                log.warning("closing the rubric of session %s failed", session.id, exc_info=True)

    def start_reaper(self) -> None:
        if self._reaper is None and self.runtime.idle_timeout_s and math.isfinite(self.runtime.idle_timeout_s):
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        idle = self.runtime.idle_timeout_s
        period = min(max(idle / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for s in list(self.sessions.values()):
                if not s.busy and now - s.last_active > idle:
                    log.info("session %s idle for %.0f s: closing", s.id, now - s.last_active)
                    s.terminate(DeadlineExceeded(f"session idle for more than {idle:g} s"))

    async def drain(self, grace_s: float = 10.0) -> None:
        """Refuse new sessions, let requests in progress finish (up to ``grace_s``),
        then end every session with UNAVAILABLE."""
        self.draining = True
        deadline = time.monotonic() + grace_s
        while any(s.busy for s in self.sessions.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for s in list(self.sessions.values()):
            s.terminate(Unavailable("server is shutting down"))
        while self.sessions and time.monotonic() < deadline + 1.0:
            await asyncio.sleep(0.02)
        for s in list(self.sessions.values()):  # transports that did not react: close directly
            await self.release(s)

    async def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for s in list(self.sessions.values()):
            await self.release(s)
        if self._closing:  # close() calls still running for sessions whose streams went away
            await asyncio.wait(set(self._closing), timeout=2 * _CLOSE_TIMEOUT_S)
        self.threads.shutdown()


def __getattr__(name: str) -> Any:
    if name == "Runtime":  # the 0.1 name (issue 29: a name that says what it holds)
        warnings.warn(
            "openenv.runtime.session.Runtime is now EnvironmentRuntime; the old name goes away in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return EnvironmentRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
