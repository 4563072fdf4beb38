"""Rule broken: an agent sees only what it may see (RFC 0012, Views; hidden_information).

The high-card game shows every agent the view of the agent to act, its private card included:
"second" sees "first"'s card while "first" decides, and the other way round."""

from typing import Any

from openenv.games import HighCard

CAUGHT_BY = "multiagent.views_private"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("hidden_information",)


class Env(HighCard):
    def observe(self, agent: str) -> Any:
        acting = self.to_act()
        return super().observe(acting[0] if acting else "first")


__all__ = ["Env"]
