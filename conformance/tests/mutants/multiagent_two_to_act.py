"""Rule broken: in a turn-based world at most one agent is to act (RFC 0012, Turn-based).

Tic-tac-toe whose ``to_act`` names both agents while the game runs: either may move, so "o" can
move first or twice in a row."""

from collections.abc import Sequence

from openenv.games import TicTacToe

CAUGHT_BY = "multiagent.turn_order"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("names 2 agents to act",)


class Env(TicTacToe):
    def to_act(self) -> Sequence[str]:
        return [] if self.over else ["x", "o"]


__all__ = ["Env"]
