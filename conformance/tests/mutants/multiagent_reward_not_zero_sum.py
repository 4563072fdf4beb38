"""Rule broken: each episode's per-agent returns sum to the declared reward_sum (RFC 0012, Rewards).

Tic-tac-toe declares a zero-sum game (reward_sum 0) but never penalises the loser: a won game's
returns sum to 1."""

from typing import Any

from openenv.games import TicTacToe
from openenv.runtime.multiagent import WorldStep

CAUGHT_BY = "multiagent.reward_sum"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("not the declared reward_sum",)


class Env(TicTacToe):
    def step(self, actions: Any) -> Any:
        out = super().step(actions)
        if isinstance(out, WorldStep):
            out.rewards = {a: r for a, r in out.rewards.items() if r is not None and r > 0}
        return out


__all__ = ["Env"]
