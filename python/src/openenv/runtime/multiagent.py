"""The author's side of multi-agent environments (RFC 0012): subclass :class:`MultiAgentEnvironment`.

A world holds several agents, each with an id (and a role). The environment keeps the whole
world's state; the runtime (:mod:`openenv.runtime.world`) asks it who is to act
(:meth:`~MultiAgentEnvironment.to_act`), what each agent sees
(:meth:`~MultiAgentEnvironment.observe`) and hands it the actions of a world step
(:meth:`~MultiAgentEnvironment.step`, keyed by agent id). What it returns is a
:class:`WorldStep`: per-agent rewards and end flags. A tiny turn-based game::

    class Nim(openenv.MultiAgentEnvironment):
        agents = {"first": "first", "second": "second"}  # id -> role (or just a tuple of ids)
        action_type = int
        observation_type = dict
        reward_sum = 0.0

        def reset(self, *, seed=None, episode_id=None, options=None):
            self.heap, self.turn = 7, 0

        def to_act(self):
            return [self.agent_ids()[self.turn]] if self.heap > 0 else []

        def observe(self, agent):
            return {"heap": self.heap, "me": agent}

        def step(self, actions):
            (agent, take), = actions.items()
            if take not in (1, 2, 3) or take > self.heap:
                raise openenv.InvalidAction(f"take 1, 2 or 3 (at most {self.heap})")
            self.heap -= take
            if self.heap == 0:  # the agent that took the last one wins
                other = self.agent_ids()[1 - self.turn]
                return openenv.WorldStep(rewards={agent: 1.0, other: -1.0}, terminated=True)
            self.turn = 1 - self.turn
            return None  # no rewards, nobody done

What the runtime guarantees (docs/multiagent.md says more):

* One instance per world; calls to it never overlap, whatever session they come from.
* :meth:`step` only receives actions of agents that :meth:`to_act` named, each decoded and
  validated against :attr:`action_type`; in a turn-based world exactly one, in a simultaneous
  world one for each agent :meth:`to_act` named.
* A session sees only the views (:meth:`observe`), rewards and metadata of the agents it acts
  for; :meth:`state` (the world's) only a session acting for every agent.
* The world's episode ends when every agent is done (terminated or truncated), or at
  :attr:`~openenv.Environment.max_episode_steps` world steps, which truncates every agent not done.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from openenv.runtime.environment import Environment
from openenv.v1 import multiagent_pb2

__all__ = ["MultiAgentEnvironment", "WorldStep", "multi_agent_spec"]

ILLEGAL_ACTIONS = ("reject", "penalize")
VACANCIES = ("truncate", "forfeit")


@dataclasses.dataclass
class WorldStep:
    """What :meth:`MultiAgentEnvironment.reset` and :meth:`~MultiAgentEnvironment.step` may return
    (``None`` means an empty ``WorldStep``: no rewards, nobody done).

    ``rewards``: agent id -> reward of this world step (agents left out get none, which is not 0);
    every agent's reward goes to the session acting for it, whoever's action earned it.
    ``terminated`` / ``truncated``: agent id -> flag, or one bool for every agent; an agent once
    done stays done for the rest of the episode (it is never to act again). ``metadata``: the
    world's (JSON-like), sent to every session of the world. ``infos``: agent id -> JSON-like
    metadata for that agent only. ``reward_breakdowns``: agent id -> an
    :class:`openenv.rubrics.Score` (or a ``RubricScore`` message) explaining that agent's reward.
    """

    rewards: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    terminated: Mapping[str, bool] | bool = False
    truncated: Mapping[str, bool] | bool = False
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    infos: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    reward_breakdowns: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class MultiAgentEnvironment(Environment):
    """Base class of multi-agent environments (RFC 0012): declare :attr:`agents`, override
    :meth:`reset`, :meth:`to_act`, :meth:`observe` and :meth:`step`.

    Everything :class:`openenv.Environment` declares still applies (``action_type``,
    ``observation_type``, ``state_type``, ``deterministic``, ``seeded``, ``max_episode_steps``
    counted in world steps, ``metadata``, ``example_actions``...), with these differences:
    ``action_type`` is the type of one agent's action, ``observation_type`` the type of one
    agent's view; tools, snapshots, tasks, rubrics and ``auto_reset`` are not offered for
    multi-agent worlds in this version (the requests answer ``UNIMPLEMENTED``).

    Hooks may be ``def`` or ``async def``, as the base class's.
    """

    agents: ClassVar[Sequence[str] | Mapping[str, str]] = ()
    """The world's agents: their ids in order (a tuple of strings), or a mapping id -> role.
    Advertised in ``EnvironmentInfo.multi_agent.agents``; a role defaults to the id. Required
    (at least one agent); ids are non-empty and unique.
    """
    agent_descriptions: ClassVar[Mapping[str, str]] = {}
    """Optional: agent id -> one line saying what that agent does (``AgentSpec.description``)."""
    simultaneous: ClassVar[bool] = False
    """False (the default): turn-based, one agent acts at a time (PettingZoo's AEC API):
    :meth:`to_act` names at most one agent. True: every agent :meth:`to_act` names acts in the
    same world step (PettingZoo's Parallel API) and :meth:`step` receives all their actions at once.
    """
    reward_sum: ClassVar[float | None] = None
    """When set, every episode's returns (each agent's rewards summed over the episode) sum over
    the agents to this value: ``0.0`` for a zero-sum game. Advertised as
    ``MultiAgentSpec.reward_sum``; ``openenv certify`` checks it (``multiagent.reward_sum``).
    """
    illegal_actions: ClassVar[str] = "reject"
    """What an action the rules forbid does. ``"reject"`` (the default): :meth:`step` raises
    :class:`openenv.InvalidAction`, the step is answered ``INVALID_ARGUMENT`` and nothing changes
    (the same agent is still to act). ``"penalize"``: :meth:`step` accepts it and penalises the
    agent (e.g. it loses), as PettingZoo's classic games do. Advertised, not enforced.
    """
    joinable: ClassVar[bool] = True
    """True (the default): further sessions may join a world with its join token and act for the
    agents nobody acts for (agent vs agent across clients). False: one session per world, acting
    for every agent (self-play only).
    """
    hidden_information: ClassVar[bool] = False
    """True when agents do not all see the same thing (cards in a hand, a private goal): then
    some agent's :meth:`observe` differs from another's at some point of every episode, which
    ``openenv certify`` checks (``multiagent.hidden_information``). The runtime sends a session
    only its own agents' views whatever this says.
    """

    rejoin_timeout: ClassVar[float | None] = 60.0
    """Seconds a seat left empty during a running episode (its session closed or disconnected
    while some of its agents are not done) stays open for another session to join for its agents
    (RFC 0016). The other sessions are told at once (a ``"left"`` seat event with this deadline);
    when it passes with the seat still empty, :attr:`vacancy` ends the episode. ``None``: the
    world waits as long as it lives (protocol 1.4's behaviour). Advertised as
    ``MultiAgentSpec.rejoin_timeout``.
    """
    vacancy: ClassVar[str] = "truncate"
    """What ends an episode whose empty seat's rejoin deadline passed (RFC 0016): ``"truncate"``
    (the default: every agent not done is truncated, nobody is rewarded for it) or ``"forfeit"``
    (:meth:`forfeit` decides the outcome, then every agent still not done is truncated).
    Advertised as ``MultiAgentSpec.vacancy``.
    """
    agent_action_types: ClassVar[Mapping[str, Any]] = {}
    """Optional (RFC 0016): agent id -> that agent's own action declaration, when agents act
    differently (PettingZoo's per-agent action spaces). Each must be narrower than or equal to
    :attr:`action_type`, which every action is still validated against first; an agent's action
    is then validated against its own. Advertised as ``AgentSpec.action``.
    """
    agent_observation_types: ClassVar[Mapping[str, Any]] = {}
    """Optional (RFC 0016): agent id -> that agent's own view declaration (narrower than or equal
    to :attr:`observation_type`). Advertised as ``AgentSpec.observation``.
    """

    @classmethod
    def agent_ids(cls) -> tuple[str, ...]:
        """The ids of :attr:`agents`, in order."""
        return tuple(cls.agents)

    @classmethod
    def agent_roles(cls) -> dict[str, str]:
        """Agent id -> role (the id itself when :attr:`agents` is a sequence)."""
        if isinstance(cls.agents, Mapping):
            return {str(k): str(v) for k, v in cls.agents.items()}
        return {a: a for a in cls.agents}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__openenv_async__ = cls.__openenv_async__ | frozenset(
            m for m in ("observe", "to_act", "forfeit") if inspect.iscoroutinefunction(getattr(cls, m))
        )

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> Any:
        """Start an episode of the world: every agent in play. Return ``None`` or a
        :class:`WorldStep` (rewards are unusual here; agents done at once may be flagged).

        Called only for the session that owns the world (``WorldInfo.owner``): the other sessions'
        resets wait for it. Arguments as :meth:`openenv.Environment.reset`.
        """
        return None

    def step(self, actions: Mapping[str, Any]) -> Any:
        """Apply one world step: ``actions`` maps agent id -> decoded action, for exactly the
        agent to act (turn-based) or every agent to act (simultaneous), as :meth:`to_act` said.
        Return ``None`` or a :class:`WorldStep`.

        Raise :class:`openenv.InvalidAction` for an action the rules reject (with
        :attr:`illegal_actions` ``"reject"``): the step is answered ``INVALID_ARGUMENT`` and must
        change nothing. Any other exception is answered ``INTERNAL`` and the world goes on.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement step")

    def to_act(self) -> Sequence[str]:
        """The agents to act now, in the environment's order: at most one in a turn-based world,
        every agent still in play in a simultaneous one (usually); empty when nobody can act.
        Never an agent that is done. Called after every reset and step; must not change state.
        Default: every agent (simultaneous) or the first (turn-based)."""
        ids = self.agent_ids()
        return ids if self.simultaneous else ids[:1]

    def forfeit(self, absent: Sequence[str]) -> WorldStep | None:
        """The outcome of an episode whose ``absent`` agents' seat stayed empty past its rejoin
        deadline, with :attr:`vacancy` ``"forfeit"`` (RFC 0016). Return a :class:`WorldStep`
        (its rewards are added to the episode's; agents it leaves not done are then truncated).

        Default: each absent agent is rewarded -1 and terminated, and the agents present share
        +1 per absent agent (so a zero-sum game stays zero-sum: in a two-player game the
        leaver loses and the other wins); override it for any other scoring."""
        present = [a for a in self.agent_ids() if a not in absent]
        rewards = dict.fromkeys(absent, -1.0)
        if present:
            rewards.update(dict.fromkeys(present, len(absent) / len(present)))
        return WorldStep(rewards=rewards, terminated=True)

    def observe(self, agent: str) -> Any:
        """What ``agent`` sees now (a value of :attr:`observation_type`): only what it may
        know. Called after reset and steps for each agent a time step is sent for (possibly
        several times for one world state); must not change state. Default ``None``."""
        return None


def multi_agent_spec(cls: type[MultiAgentEnvironment]) -> multiagent_pb2.MultiAgentSpec:
    """The ``MultiAgentSpec`` a class advertises; ValueError for a malformed declaration
    (checked when a server starts)."""
    ids = cls.agent_ids()
    if not ids:
        raise ValueError(f"{cls.__name__}.agents declares no agent")
    if not all(isinstance(a, str) and a for a in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"{cls.__name__}.agents: ids must be unique non-empty strings, got {list(ids)!r}")
    if cls.illegal_actions not in ILLEGAL_ACTIONS:
        raise ValueError(
            f"{cls.__name__}.illegal_actions must be one of {ILLEGAL_ACTIONS}, not {cls.illegal_actions!r}"
        )
    if cls.vacancy not in VACANCIES:
        raise ValueError(f"{cls.__name__}.vacancy must be one of {VACANCIES}, not {cls.vacancy!r}")
    if cls.rejoin_timeout is not None and not cls.rejoin_timeout > 0:
        raise ValueError(f"{cls.__name__}.rejoin_timeout must be positive seconds or None, not {cls.rejoin_timeout!r}")
    for what, table in (
        ("agent_action_types", cls.agent_action_types),
        ("agent_observation_types", cls.agent_observation_types),
    ):
        stray = [a for a in table if a not in ids]
        if stray:
            raise ValueError(f"{cls.__name__}.{what} names agents it does not declare: {stray}")
    spec = multiagent_pb2.MultiAgentSpec(
        mode=multiagent_pb2.TURN_MODE_SIMULTANEOUS if cls.simultaneous else multiagent_pb2.TURN_MODE_TURN_BASED,
        illegal_actions=(
            multiagent_pb2.ILLEGAL_ACTION_POLICY_PENALIZE
            if cls.illegal_actions == "penalize"
            else multiagent_pb2.ILLEGAL_ACTION_POLICY_REJECT
        ),
        joinable=cls.joinable,
        hidden_information=cls.hidden_information,
        vacancy=(
            multiagent_pb2.VACANCY_POLICY_FORFEIT
            if cls.vacancy == "forfeit"
            else multiagent_pb2.VACANCY_POLICY_TRUNCATE
        ),
    )
    if cls.rejoin_timeout is not None:
        spec.rejoin_timeout.FromNanoseconds(int(cls.rejoin_timeout * 1e9))
    if cls.reward_sum is not None:
        spec.reward_sum = float(cls.reward_sum)
    for agent, role in cls.agent_roles().items():
        spec.agents.add(id=agent, role=role, description=cls.agent_descriptions.get(agent, ""))
    return spec
