"""The environment author's side: subclass :class:`Environment`.

A minimal environment::

    class Counter(openenv.Environment):
        action_type = CounterAction          # a proto message class, a dataclass, ...
        observation_type = CounterObservation

        def reset(self, *, seed=None, episode_id=None, options=None):
            self.n = 0
            return CounterObservation(value=0)

        def step(self, action):
            self.n += action.delta
            return openenv.StepResult(CounterObservation(value=self.n), reward=1.0,
                                      terminated=self.n >= 10)

    openenv.serve(Counter, port=50051)

What you may rely on:

* One instance per session, created by the factory with the session's handshake
  options as keyword arguments; ``close()`` is called exactly once when the session
  ends (close request, disconnect, cancellation, idle timeout or shutdown).
* Calls to one instance never overlap. Sync methods run in a worker thread (off the
  event loop) unless ``run_in_thread = False``; ``async def`` methods run on the loop.
* The runtime validates actions against ``action_type`` before ``step`` sees them,
  counts steps, assigns episode ids, refuses steps before reset or after the end, and
  truncates at ``max_episode_steps``. ``state()`` only returns the environment-specific
  part; episode id, step count and status are added by the runtime.
* Raise :class:`openenv.InvalidAction` for an action you reject; any other exception
  becomes an INTERNAL error for that request and never ends the session or the server.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from openenv.tools import ToolDef, collect_tools

if TYPE_CHECKING:
    from openenv.rubrics import Rubric

__all__ = ["Environment", "StepResult"]

ObsT = TypeVar("ObsT")


@dataclasses.dataclass
class StepResult(Generic[ObsT]):
    """One time step: what ``reset``/``step`` return and what clients receive.

    ``reward`` is ``None`` when the step has no reward (which is not 0). ``terminated``
    and ``truncated`` have Gymnasium semantics; ``done`` is their disjunction.
    ``metadata`` travels with every transport. ``reward_breakdown`` is the rubric score
    tree (a :class:`openenv.v1.rubric_pb2.RubricScore`) when the environment has a rubric.
    ``episode_id`` and ``step_count`` are filled in by the runtime.
    """

    observation: ObsT | None = None
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    reward_breakdown: Any = None
    episode_id: str = ""
    step_count: int = 0

    @property
    def done(self) -> bool:
        """True when the episode is over (terminated or truncated)."""
        return self.terminated or self.truncated


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Environment:
    """Base class of environments. Override ``reset`` and ``step``; the rest is optional.

    Declarations (class attributes):
        name, version, description: identity shown to clients (``name`` defaults to the
            class name in snake case).
        action_type, observation_type, state_type: the payload types (see
            :mod:`openenv.codec`); ``None`` accepts any JSON-like value.
        max_sessions: capacity of one server process.
        concurrent_sessions: False when instances cannot run side by side in one
            process; capacity is then 1.
        deterministic: True when the same seed and actions give the same trajectory.
        float_tolerance: absolute tolerance for comparing floats in determinism checks.
        auto_reset: True to start a new episode on a step after the end.
        max_episode_steps: the runtime truncates episodes at this many steps.
        reward_range: inclusive (min, max) bounds of every reward, if bounded.
        run_in_thread: run sync methods in a worker thread (default True).
        example_actions: valid actions, used by the conformance suite as seeds.
        action_budget: steps per episode a conformance run should spend (0: default).
        metadata: free-form (author, documentation_url, readme, ...).
        rubric: an :class:`openenv.rubrics.Rubric` tree. Its spec is advertised in the
            environment info; each session gets its own copy (``self.rubric``, bound to
            the instance), reset on every episode reset, and every step whose result has
            no reward is scored by it: reward = root score, reward_breakdown = the tree.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0.1.0"
    description: ClassVar[str] = ""
    action_type: ClassVar[Any] = None
    observation_type: ClassVar[Any] = None
    state_type: ClassVar[Any] = None
    max_sessions: ClassVar[int] = 64
    concurrent_sessions: ClassVar[bool] = True
    deterministic: ClassVar[bool] = False
    float_tolerance: ClassVar[float] = 0.0
    auto_reset: ClassVar[bool] = False
    max_episode_steps: ClassVar[int | None] = None
    reward_range: ClassVar[tuple[float, float] | None] = None
    run_in_thread: ClassVar[bool] = True
    example_actions: ClassVar[Sequence[Any]] = ()
    action_budget: ClassVar[int] = 0
    metadata: ClassVar[Mapping[str, Any]] = {}
    rubric: Rubric | None = None

    # Filled by __init_subclass__: tools and which methods are coroutines.
    __openenv_tools__: ClassVar[dict[str, ToolDef]] = {}
    __openenv_async__: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # An explicit name is inherited; a derived one is derived again for each subclass.
        if not cls.__dict__.get("name") and (not cls.name or getattr(cls, "__openenv_derived_name__", False)):
            cls.name = _snake(cls.__name__)
            cls.__openenv_derived_name__ = True
        elif cls.__dict__.get("name"):
            cls.__openenv_derived_name__ = False
        cls.__openenv_tools__ = collect_tools(cls)
        cls.__openenv_async__ = frozenset(
            m for m in ("reset", "step", "state", "close") if inspect.iscoroutinefunction(getattr(cls, m)))
        if cls.__openenv_tools__ and cls.action_type is None and cls.step is Environment.step:
            from openenv.tools import CallToolAction, CallToolObservation

            cls.action_type = CallToolAction
            cls.observation_type = CallToolObservation

    def __init__(self, **options: Any) -> None:
        """Receives the session's handshake options. Unknown options may be ignored."""
        self.options = options

    def reset(self, *, seed: int | None = None, episode_id: str | None = None,
              options: Mapping[str, Any] | None = None) -> Any:
        """Start an episode. Return the first observation or a :class:`StepResult`."""
        return None

    def step(self, action: Any) -> Any:
        """Apply ``action``. Return a :class:`StepResult` (or just an observation).

        The default, for environments that declare tools and no step, calls the tool
        named by a :class:`openenv.CallToolAction` and returns a
        :class:`openenv.CallToolObservation` whose reward comes from :meth:`reward`.
        """
        from openenv.errors import Unimplemented

        raise Unimplemented(f"{type(self).__name__} does not implement step")

    def state(self) -> Any:
        """The environment-specific state (of ``state_type``), or None."""
        return None

    def close(self) -> None:
        """Release resources. Called exactly once per instance."""

    def reward(self, action: Any, observation: Any) -> float | None:
        """Reward of a tool-call step (used by the default tool ``step``). Default: none
        (the rubric scores the step when the environment declares one)."""
        return None

    def finish_tool_step(self, action: Any, observation: Any) -> Any:
        """The result of a tool-call step of the default tool ``step``, after the tool ran.

        ``observation`` is the :class:`openenv.CallToolObservation`. The default returns it
        with :meth:`reward`; override to end the episode (e.g. on a ``submit_answer``
        tool) or to add metadata. Runs on the event loop: keep it cheap.
        """
        return StepResult(observation=observation, reward=self.reward(action, observation))

    @classmethod
    def tools(cls) -> dict[str, ToolDef]:
        """The tools this environment declares (name -> definition)."""
        return cls.__openenv_tools__
