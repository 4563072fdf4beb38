"""Connect Four, native: two agents drop discs into a 6x7 grid, four in a row wins.

Agents ``red`` (moves first) and ``yellow``. An action is a column, 0-6; a full column is an
illegal move, refused with the legal ones named (the game goes on). Each agent sees the
board from its own side (``board``: rows top to bottom, 1 its discs, -1 the opponent's,
0 empty), the columns it may play (``legal_actions``, empty when it is not its turn) and a
text diagram. The winner is rewarded +1 and the loser -1 on the winning move; a full board
is a draw (0 each). Arguments ``rows`` (4-10), ``columns`` (4-10) and ``connect`` (3-6) change
the board of a :class:`ConnectFourGame`; the served environment plays the standard 6x7 board,
and the seed changes nothing (no chance in the game).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv_catalog.games.bind import environment
from openenv_catalog.games.core import Game

__all__ = ["ConnectFourEnvironment", "ConnectFourGame"]

AGENTS = ("red", "yellow")
MARKS = {0: ".", 1: "X", 2: "O"}


class ConnectFourGame(Game):
    """One game of Connect Four (any board size the options allow)."""

    agents = AGENTS
    seeded = False  # no chance in the game
    reward_sum = 0.0
    reward_range = (-1.0, 1.0)

    def __init__(self, rows: int = 6, columns: int = 7, connect: int = 4) -> None:
        if not (4 <= rows <= 10 and 4 <= columns <= 10 and 3 <= connect <= min(6, rows, columns)):
            raise ValueError("options: rows 4-10, columns 4-10, connect 3-6 and at most the board's sides")
        self.rows, self.columns, self.connect = rows, columns, connect
        self.roles = {"red": "first", "yellow": "second"}
        self.max_steps = rows * columns
        self.action_type = {"type": "integer", "minimum": 0, "maximum": columns - 1}
        cell = {"type": "integer", "minimum": -1, "maximum": 1}
        row = {"type": "array", "items": cell, "minItems": columns, "maxItems": columns}
        self.observation_type = {
            "type": "object",
            "properties": {
                "board": {"type": "array", "items": row, "minItems": rows, "maxItems": rows},
                "legal_actions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "text": {"type": "string"},
            },
            "required": ["board", "legal_actions", "text"],
            "additionalProperties": False,
        }
        super().__init__()
        self.reset(None)

    def reset(self, seed: int | None) -> None:
        self.grid = [[0] * self.columns for _ in range(self.rows)]  # row 0 is the top; 1 red, 2 yellow
        self.turn = 0
        self.moves: list[int] = []
        self.winner: str | None = None
        self.terminated = dict.fromkeys(self.agents, False)
        self.truncated = dict.fromkeys(self.agents, False)

    def acting(self) -> list[str]:
        return [] if self.over else [self.agents[self.turn]]

    def legal_actions(self, agent: str) -> list[int]:
        if agent not in self.acting():
            return []
        return [c for c in range(self.columns) if self.grid[0][c] == 0]

    def illegal(self, agent: str, action: Any) -> str | None:
        if isinstance(action, bool) or not isinstance(action, int):
            return f"an action is a column number, not {action!r}"
        legal = self.legal_actions(agent)
        if action not in legal:
            why = "outside the board" if not 0 <= action < self.columns else "full"
            return f"column {action} is {why}; legal columns: {legal}"
        return None

    def observe(self, agent: str) -> dict[str, Any]:
        me = self.agents.index(agent) + 1
        board = [[0 if v == 0 else (1 if v == me else -1) for v in row] for row in self.grid]
        text = "\n".join(" ".join(MARKS[v] for v in row) for row in self.grid)
        text += "\n" + " ".join(str(c) for c in range(self.columns))
        text += f"\nYou are {agent} ({MARKS[me]})."
        return {"board": board, "legal_actions": self.legal_actions(agent), "text": text}

    def _wins(self, r: int, c: int) -> bool:
        mark = self.grid[r][c]
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            count = 1
            for sign in (1, -1):
                rr, cc = r + sign * dr, c + sign * dc
                while 0 <= rr < self.rows and 0 <= cc < self.columns and self.grid[rr][cc] == mark:
                    count += 1
                    rr, cc = rr + sign * dr, cc + sign * dc
            if count >= self.connect:
                return True
        return False

    def apply(self, actions: Mapping[str, Any]) -> dict[str, float]:
        agent = self.agents[self.turn]
        col = int(actions[agent])
        row = max(r for r in range(self.rows) if self.grid[r][col] == 0)
        self.grid[row][col] = self.turn + 1
        self.moves.append(col)
        rewards = dict.fromkeys(self.agents, 0.0)
        if self._wins(row, col):
            self.winner = agent
            other = self.agents[1 - self.turn]
            rewards[agent], rewards[other] = 1.0, -1.0
            self.terminated = dict.fromkeys(self.agents, True)
        elif all(v != 0 for v in self.grid[0]):
            self.terminated = dict.fromkeys(self.agents, True)
        self.turn = 1 - self.turn
        return rewards

    def public_state(self) -> dict[str, Any]:
        return {
            "moves": list(self.moves),
            "to_act": self.acting(),
            "winner": self.winner,
            "board": ["".join(MARKS[v] for v in row) for row in self.grid],
        }


ConnectFourEnvironment = environment(
    ConnectFourGame,
    name="connect_four",
    version="0.1.0",
    description="Connect Four for two agents (red, yellow), turn by turn: a column per move, +1/-1 for four in a row.",
    source="protoenv-catalog",
    kind="game",
)
