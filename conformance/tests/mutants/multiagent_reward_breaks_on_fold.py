"""Rule broken: each episode's per-agent returns sum to the declared reward_sum (RFC 0012, Rewards),
on every path of the game, not only the first one tried (RFC 0016: the check explores).

The high-card game declares a zero-sum game, and keeps it on every path but one: when "first"
folds holding a high card (7 or more), "second" wins the pot but "first" is never charged, so the
returns sum to 1. Playing each agent's first accepted candidate ("bet", then "second" folds or
calls) never takes that path; random legal moves over many seeds do."""

from typing import Any

from openenv.games import HighCard
from openenv.runtime.multiagent import WorldStep

CAUGHT_BY = "multiagent.reward_sum"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("not the declared reward_sum",)


class Env(HighCard):
    def step(self, actions: Any) -> Any:
        ((agent, move),) = actions.items()
        high = self.cards["first"] >= 7
        out = super().step(actions)
        if agent == "first" and move == "fold" and high and isinstance(out, WorldStep):
            out.rewards = {"second": 1.0}
        return out


__all__ = ["Env"]
