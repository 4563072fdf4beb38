"""Any :class:`~openenv_catalog.games.core.Game` served as an :class:`openenv.MultiAgentEnvironment`.

:func:`environment` makes the class (one per game: its agents, spaces and rules are class
declarations, read when a server starts); :class:`GameEnvironment` maps the runtime's hooks
onto the game's: ``to_act`` -> :meth:`Game.acting`, ``observe`` -> :meth:`Game.observe`,
``step`` -> :meth:`Game.illegal` (an illegal action is refused with ``InvalidAction`` and
changes nothing: the same agent is still to act) then :meth:`Game.apply`, whose rewards and
end flags become the world step's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import openenv
from openenv_catalog.games.core import Game

__all__ = ["GameEnvironment", "environment"]


class GameEnvironment(openenv.MultiAgentEnvironment):
    """Base of the served games (one subclass per game, made by :func:`environment`)."""

    game_class: ClassVar[type[Game]]
    deterministic = True
    max_sessions = 64
    run_in_thread = True  # the runtime runs measured-fast hooks on the loop itself (openenv.runtime.inline)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.game = self.game_class()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.WorldStep:
        self.game.reset(seed)
        return openenv.WorldStep(
            terminated=dict(self.game.terminated), truncated=dict(self.game.truncated), infos=self.game.agent_infos()
        )

    def to_act(self) -> Sequence[str]:
        return self.game.acting()

    def observe(self, agent: str) -> Any:
        return self.game.observe(agent)

    def step(self, actions: Mapping[str, Any]) -> openenv.WorldStep:
        for agent, action in actions.items():
            why = self.game.illegal(agent, action)
            if why is not None:
                raise openenv.InvalidAction(why)
        rewards = self.game.apply(actions)
        return openenv.WorldStep(
            rewards=rewards,
            terminated=dict(self.game.terminated),
            truncated=dict(self.game.truncated),
            infos=self.game.agent_infos(),
        )

    def state(self) -> dict[str, Any]:
        return self.game.public_state()

    def close(self) -> None:
        self.game.close()


def _example_actions(game: Game) -> tuple[Any, ...]:
    """Legal actions of the agent to act after ``reset(0)``: actions a client (the certifier) may
    send as one ``step``. None for a simultaneous game: its step takes several agents' actions."""
    game.reset(0)
    acting = game.acting()
    if game.simultaneous or len(acting) != 1:
        return ()
    return tuple(list(game.legal_actions(acting[0]) or ())[:3])


def _seeded(game: Game) -> bool:
    """Whether the reset's seed selects the game: what the game says, else whether a few seeds
    give different first views (a game whose chance shows only later is not declared seeded)."""
    if game.seeded is not None:
        return game.seeded
    seen = []
    for seed in range(4):
        game.reset(seed)
        seen.append(repr([game.observe(a) for a in game.agents]))
    return len(set(seen)) > 1


def environment(
    game_class: type[Game],
    *,
    name: str,
    version: str,
    description: str,
    source: str,
    kind: str,
    example_actions: Sequence[Any] | None = None,
    hidden_information: bool | None = None,
    reward_sum: float | None = None,
    threaded: bool = True,
) -> type[GameEnvironment]:
    """The environment class serving ``game_class`` (probed once here for its declarations).

    ``hidden_information`` and ``reward_sum`` default to what the game says
    (:attr:`Game.hidden_information`, :attr:`Game.reward_sum`): importers declare what their
    source knows but does not say (PettingZoo's classic games);
    ``threaded`` (the default) lets the runtime run the hooks on worker threads when they are slow
    (a PettingZoo environment may simulate physics); False keeps every call on the event loop,
    one at a time (TextArena: process-wide generators swapped in around each call).
    """
    probe = game_class()
    try:
        examples = tuple(example_actions) if example_actions is not None else _example_actions(probe)
        attrs: dict[str, Any] = {
            "game_class": game_class,
            "name": name,
            "version": version,
            "description": description,
            "agents": {a: probe.roles.get(a, a) for a in probe.agents},
            "simultaneous": bool(probe.simultaneous),
            "action_type": probe.action_type,
            "observation_type": probe.observation_type,
            "reward_sum": probe.reward_sum if reward_sum is None else reward_sum,
            "reward_range": probe.reward_range,
            "max_episode_steps": probe.max_steps,
            "illegal_actions": probe.illegal_actions,
            "hidden_information": probe.hidden_information if hidden_information is None else hidden_information,
            "seeded": _seeded(probe),
            "example_actions": examples,
            "agent_action_types": dict(probe.agent_action_types),
            "agent_observation_types": dict(probe.agent_observation_types),
            "run_in_thread": threaded,
            "metadata": {"source": source, "kind": kind},
        }
    finally:
        probe.close()
    return type(f"{game_class.__name__}Environment", (GameEnvironment,), attrs)
