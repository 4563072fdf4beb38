"""OpenSpiel games (``pyspiel``) as :class:`~openenv_catalog.games.core.Game`\\ s.

Agents are ``player_0`` .. ``player_{n-1}``, OpenSpiel's own seats. An action is OpenSpiel's
action id (an integer); an agent's observation is its own view, never another's:
``text`` is OpenSpiel's observation string for that player (kuhn poker's shows the agent's
card only), ``tensor`` its observation tensor, ``legal_actions`` and ``legal_action_names``
what it may play now (empty when it is not its turn). Chance nodes (the deal) are played by
the game from a generator seeded by ``reset(seed)``, so a seed gives one game. Sequential
games are turn-based; simultaneous ones (matrix games, goofspiel) take a joint action.
A transition's rewards are the change in OpenSpiel's returns, so an agent's rewards sum to its
return at the end.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from openenv_catalog.games.core import Game

__all__ = ["OpenSpielGame", "pyspiel"]


def pyspiel() -> Any:
    from openenv_catalog.importers import ImporterUnavailable

    try:
        import pyspiel as module
    except ImportError as e:
        raise ImporterUnavailable(
            f"open-spiel is not installed: pip install 'protoenv-catalog[openspiel]' ({e})"
        ) from e
    return module


class OpenSpielGame(Game):
    """One OpenSpiel game in progress (subclassed per game by the importer: ``game_string``)."""

    game_string: str = ""

    def __init__(self) -> None:
        self.game = pyspiel().load_game(self.game_string)
        kind = self.game.get_type()
        n = self.game.num_players()
        self.agents = tuple(f"player_{i}" for i in range(n))
        self.roles = {a: f"seat {i}" for i, a in enumerate(self.agents)}
        spiel = pyspiel()
        self.simultaneous = kind.dynamics == spiel.GameType.Dynamics.SIMULTANEOUS
        if kind.utility in (spiel.GameType.Utility.ZERO_SUM, spiel.GameType.Utility.CONSTANT_SUM):
            self.reward_sum = float(self.game.utility_sum())
        # One-shot games (matrix games) show no agent anything of the other's simultaneous move:
        # the views are the same; only imperfect-information games hide something in them.
        self.hidden_information = kind.information == spiel.GameType.Information.IMPERFECT_INFORMATION
        self.seeded = kind.chance_mode != spiel.GameType.ChanceMode.DETERMINISTIC
        self._tensor = kind.provides_observation_tensor
        self._text = kind.provides_observation_string
        self.num_actions = self.game.num_distinct_actions()
        self.action_type = {"type": "integer", "minimum": 0, "maximum": self.num_actions - 1}
        props: dict[str, Any] = {
            "text": {"type": "string"},
            "legal_actions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "legal_action_names": {"type": "array", "items": {"type": "string"}},
        }
        if self._tensor:
            size = 1
            for d in self.game.observation_tensor_shape():
                size *= int(d)
            props["tensor"] = {"type": "array", "items": {"type": "number"}, "minItems": size, "maxItems": size}
        self.observation_type = {
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
        }
        self.reward_range = (float(self.game.min_utility()), float(self.game.max_utility()))
        self.max_steps = int(self.game.max_game_length())
        super().__init__()
        self.reset(None)

    def reset(self, seed: int | None) -> None:
        self.rng = random.Random(seed)
        self.state = self.game.new_initial_state()
        self._returns = [0.0] * len(self.agents)
        self.terminated = dict.fromkeys(self.agents, False)
        self.truncated = dict.fromkeys(self.agents, False)
        self._chance()

    def _chance(self) -> None:
        """Play chance nodes (deals, draws) from the seeded generator."""
        while self.state.is_chance_node():
            outcomes, probs = zip(*self.state.chance_outcomes(), strict=True)
            self.state.apply_action(self.rng.choices(outcomes, weights=probs)[0])

    def _player(self, agent: str) -> int:
        return self.agents.index(agent)

    def acting(self) -> list[str]:
        if self.state.is_terminal():
            return []
        if self.state.is_simultaneous_node():
            return [a for a in self.agents if self.state.legal_actions(self._player(a))]
        return [self.agents[self.state.current_player()]]

    def legal_actions(self, agent: str) -> Sequence[int]:
        if agent not in self.acting():
            return []
        return list(self.state.legal_actions(self._player(agent)))

    def illegal(self, agent: str, action: Any) -> str | None:
        legal = self.legal_actions(agent)
        if action in legal:
            return None
        names = [self.state.action_to_string(self._player(agent), a) for a in legal]
        return f"{action!r} is not a legal action of {agent} here; legal: " + ", ".join(
            f"{a} ({n})" for a, n in zip(legal, names, strict=True)
        )

    def observe(self, agent: str) -> dict[str, Any]:
        p = self._player(agent)
        legal = self.legal_actions(agent)
        obs: dict[str, Any] = {
            "text": self.state.observation_string(p) if self._text else "",
            "legal_actions": legal,
            "legal_action_names": [self.state.action_to_string(p, a) for a in legal],
        }
        if self._tensor:
            obs["tensor"] = [float(x) for x in self.state.observation_tensor(p)]
        return obs

    def apply(self, actions: Mapping[str, Any]) -> dict[str, float]:
        if self.state.is_simultaneous_node():
            joint = [int(actions[a]) if a in actions else 0 for a in self.agents]
            self.state.apply_actions(joint)
        else:
            (agent,) = self.acting()
            self.state.apply_action(int(actions[agent]))
        self._chance()
        returns = [float(r) for r in self.state.returns()]
        rewards = {a: returns[i] - self._returns[i] for i, a in enumerate(self.agents)}
        self._returns = returns
        if self.state.is_terminal():
            self.terminated = dict.fromkeys(self.agents, True)
        return rewards

    def public_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "game": self.game_string,
            "to_act": self.acting(),
            "moves": self.state.move_number(),
            "terminal": self.state.is_terminal(),
        }
        if self.state.is_terminal():
            out["returns"] = dict(zip(self.agents, self._returns, strict=True))
        return out
