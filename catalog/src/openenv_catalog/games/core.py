"""The games' common core: a multi-agent game as the catalog's adapters see it.

Each adapter (OpenSpiel, PettingZoo AEC and Parallel, TextArena, the native Connect Four)
implements :class:`Game`; one binding (:mod:`openenv_catalog.games.bind`) serves any
:class:`Game` as a multi-agent openenv environment, so the wire rules (who acts, who sees
what, who is rewarded) are written once.

The rules a :class:`Game` keeps:

* ``agents`` is fixed for the game (every agent that can ever take part), in seat order;
* :meth:`acting` lists the agents whose actions the next :meth:`apply` takes: one in a
  turn-based game, every live agent in a simultaneous one, none when the game is over;
* :meth:`observe` is an agent's own view: it never shows what that agent must not see
  (the other player's cards), and :meth:`public_state` shows what every agent may see;
* :meth:`illegal` says why an action is refused (``None`` when it is legal), before anything
  changes: a refused action leaves the game as it was;
* :meth:`apply` returns every agent's reward for that transition (an agent that did not act
  may be rewarded too: the loser of a game is rewarded -1 on the winner's move).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Game"]


class Game(abc.ABC):
    """One game in progress. Subclasses set the class attributes and the hooks."""

    agents: tuple[str, ...] = ()
    """Every agent of the game, in seat order (``player_0``, ``white``, ...)."""
    roles: Mapping[str, str] = {}
    """Each agent's role (``"white"``, ``"first"``, ...); the agent id when the game has none."""
    simultaneous: bool = False
    """True when every live agent acts at once (a joint action), False when one acts at a time."""
    action_type: Any = None
    """One agent's action (an openenv declaration: a JSON Schema, a type)."""
    observation_type: Any = None
    """One agent's view."""
    reward_range: tuple[float, float] | None = None
    reward_sum: float | None = None
    """When set, every episode's returns sum over the agents to this (0.0: zero-sum)."""
    hidden_information: bool = False
    """True when agents see different things (cards in a hand, private messages)."""
    seeded: bool | None = None
    """True when the reset's seed selects the game (a deal, a draw), False when it changes
    nothing; ``None``: unknown, the binding probes a few seeds' first views."""
    illegal_actions: str = "reject"
    """``"reject"``: :meth:`illegal` refuses what the rules forbid; ``"penalize"``: the game itself
    takes any action and punishes a bad one (TextArena's warnings and losses)."""
    max_steps: int | None = None
    """The most world steps a game lasts (``None``: no bound known)."""
    agent_action_types: Mapping[str, Any] = {}
    """Agent id -> its own action declaration, when agents' actions differ (RFC 0016)."""
    agent_observation_types: Mapping[str, Any] = {}
    """Agent id -> its own view declaration, when agents' views differ (RFC 0016)."""

    def __init__(self) -> None:
        self.terminated: dict[str, bool] = dict.fromkeys(self.agents, False)
        self.truncated: dict[str, bool] = dict.fromkeys(self.agents, False)

    @abc.abstractmethod
    def reset(self, seed: int | None) -> None:
        """Start a new game (the same seed, the same game)."""

    @abc.abstractmethod
    def acting(self) -> list[str]:
        """The agents whose actions the next :meth:`apply` takes (empty once the game is over)."""

    @abc.abstractmethod
    def observe(self, agent: str) -> Any:
        """``agent``'s own view of the game, in the form :attr:`observation_type` declares."""

    def legal_actions(self, agent: str) -> Sequence[Any] | None:
        """``agent``'s legal actions now (``None``: the game does not enumerate them)."""
        return None

    def illegal(self, agent: str, action: Any) -> str | None:
        """Why ``action`` is refused for ``agent`` now, or ``None`` when it is legal."""
        legal = self.legal_actions(agent)
        if legal is not None and action not in legal:
            return f"{action!r} is not a legal action of {agent} here; legal: {list(legal)}"
        return None

    @abc.abstractmethod
    def apply(self, actions: Mapping[str, Any]) -> dict[str, float]:
        """Apply the acting agents' (legal) actions; every agent's reward for the transition."""

    def agent_infos(self) -> dict[str, dict[str, Any]]:
        """Each agent's own info after the last reset or transition (JSON-like; PettingZoo's
        ``infos``), sent only to the session acting for that agent. Default: none."""
        return {}

    def public_state(self) -> dict[str, Any]:
        """What every agent may see of the game (never a hidden card)."""
        return {}

    @property
    def over(self) -> bool:
        return all(self.terminated[a] or self.truncated[a] for a in self.agents)

    def close(self) -> None:  # noqa: B027 - optional: most games hold nothing
        """Release what the game holds."""
