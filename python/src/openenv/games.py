"""Tiny reference multi-agent games (RFC 0012, docs/multiagent.md): the authoring API at work.

* :class:`TicTacToe`: turn-based, two agents (``"x"`` moves first, then ``"o"``), illegal
  moves rejected, zero-sum (+1 / -1, a draw 0 / 0).
* :class:`RockPaperScissors`: simultaneous, two agents (``"player_0"``, ``"player_1"``),
  three rounds, each round +1 / -1 (a tie 0 / 0), zero-sum.
* :class:`HighCard`: turn-based with hidden information: each agent is dealt a private card
  (from the seed), the first agent bets or folds, the second calls or folds; a showdown
  compares the cards. An agent sees its own card, never the other's until the showdown.

A player whose opponent's session leaves during a game and does not come back within
``rejoin_timeout`` (60 s) wins by forfeit (``vacancy = "forfeit"``: the leaver -1, the other +1,
RFC 0016).

Serve one: ``openenv serve openenv.games:TicTacToe --port 50051``; play agent vs agent from two
clients (the second joins with the first one's join token) or self-play from one.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, TypedDict

from pydantic import Field

from openenv.errors import InvalidAction
from openenv.runtime.multiagent import MultiAgentEnvironment, WorldStep

__all__ = ["HighCard", "HighCardView", "RockPaperScissors", "RpsView", "TicTacToe", "TicTacToeView"]

Cell = Annotated[int, Field(ge=0, le=8)]
"""A tic-tac-toe action: the cell to take, 0-8 row by row."""
Throw = Annotated[int, Field(ge=0, le=2)]
"""A rock-paper-scissors action: 0 rock, 1 paper, 2 scissors."""
Move = Literal["bet", "call", "fold"]
"""A high-card action."""
Board = Annotated[list[Annotated[int, Field(ge=0, le=2)]], Field(min_length=9, max_length=9)]
Mask = Annotated[list[Annotated[int, Field(ge=0, le=1)]], Field(min_length=9, max_length=9)]


_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


class TicTacToeView(TypedDict):
    """One agent's view of the board: 9 cells, row by row, 0 empty, 1 its own mark, 2 the
    opponent's; ``action_mask`` 1 for each cell it may take now (all 0 when it is not to act)."""

    board: Board
    action_mask: Mask


class TicTacToe(MultiAgentEnvironment):
    """Tic-tac-toe for two agents: "x" then "o" take a free cell (0-8) in turn; three in a row wins."""

    vacancy = "forfeit"  # RFC 0016: an opponent gone past its rejoin deadline loses

    agents: ClassVar[Mapping[str, str]] = {"x": "first", "o": "second"}
    agent_descriptions: ClassVar[Mapping[str, str]] = {"x": "moves first", "o": "moves second"}
    action_type = Cell
    observation_type = TicTacToeView
    example_actions = (4, 0)
    reward_sum = 0.0
    reward_range = (-1.0, 1.0)
    deterministic = True
    max_episode_steps = 9
    run_in_thread = False  # a few microseconds per call

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.board = [""] * 9
        self.turn = 0
        self.over = True

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        self.board, self.turn, self.over = [""] * 9, 0, False

    def to_act(self) -> Sequence[str]:
        return [] if self.over else ["xo"[self.turn]]

    def observe(self, agent: str) -> TicTacToeView:
        mine = agent in self.to_act()
        return {
            "board": [0 if c == "" else 1 if c == agent else 2 for c in self.board],
            "action_mask": [int(mine and c == "") for c in self.board],
        }

    def step(self, actions: Mapping[str, Any]) -> WorldStep | None:
        ((agent, cell),) = actions.items()
        if not (0 <= cell < 9) or self.board[cell]:
            free = [i for i, c in enumerate(self.board) if not c]
            raise InvalidAction(f"cell {cell} is not free: choose one of {free}")
        self.board[cell] = agent
        other = "o" if agent == "x" else "x"
        if any(all(self.board[i] == agent for i in line) for line in _LINES):
            self.over = True
            return WorldStep(rewards={agent: 1.0, other: -1.0}, terminated=True, metadata={"winner": agent})
        if all(self.board):
            self.over = True
            return WorldStep(rewards={agent: 0.0, other: 0.0}, terminated=True, metadata={"winner": ""})
        self.turn = 1 - self.turn
        return None

    def state(self) -> dict[str, Any]:
        return {"board": list(self.board), "turn": "xo"[self.turn], "over": self.over}

    def render(self) -> str:
        rows = [" ".join(c or "." for c in self.board[r * 3 : r * 3 + 3]) for r in range(3)]
        return "\n".join(rows)


class RpsView(TypedDict):
    """One agent's view: the round (0-based) and the opponent's throw in the last round (0 rock,
    1 paper, 2 scissors; -1 before the first)."""

    round: Annotated[int, Field(ge=0, le=3)]
    opponent_last: Annotated[int, Field(ge=-1, le=2)]


class RockPaperScissors(MultiAgentEnvironment):
    """Rock-paper-scissors, three rounds, both agents throw at once (0 rock, 1 paper, 2 scissors)."""

    vacancy = "forfeit"  # RFC 0016: an opponent gone past its rejoin deadline loses

    agents = ("player_0", "player_1")
    simultaneous = True
    action_type = Throw
    observation_type = RpsView
    example_actions = (0, 1, 2)
    reward_sum = 0.0
    reward_range = (-1.0, 1.0)
    deterministic = True
    rounds = 3
    run_in_thread = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.round, self.last = 0, {"player_0": -1, "player_1": -1}

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        self.round, self.last = 0, {"player_0": -1, "player_1": -1}

    def to_act(self) -> Sequence[str]:
        return [] if self.round >= self.rounds else list(self.agents)

    def observe(self, agent: str) -> RpsView:
        other = "player_1" if agent == "player_0" else "player_0"
        return {"round": self.round, "opponent_last": self.last[other]}

    def step(self, actions: Mapping[str, Any]) -> WorldStep:
        bad = {a: t for a, t in actions.items() if t not in (0, 1, 2)}
        if bad:
            raise InvalidAction(f"throw 0 (rock), 1 (paper) or 2 (scissors), not {bad}")
        a, b = actions["player_0"], actions["player_1"]
        self.last = {"player_0": a, "player_1": b}
        self.round += 1
        win = (a - b) % 3  # 1: player_0 wins, 2: player_1 wins
        r0 = 1.0 if win == 1 else -1.0 if win == 2 else 0.0
        return WorldStep(rewards={"player_0": r0, "player_1": -r0}, terminated=self.round >= self.rounds)

    def state(self) -> dict[str, Any]:
        return {"round": self.round, "last": dict(self.last)}


class HighCardView(TypedDict):
    """One agent's view: its own card (1-9), the bets so far ("bet", "call", "fold"), the
    opponent's card once revealed at the showdown (0 before), and ``action_mask``: 1 for each of
    "bet", "call", "fold" it may play now."""

    card: Annotated[int, Field(ge=1, le=9)]
    history: list[Move]
    opponent_card: Annotated[int, Field(ge=0, le=9)]
    action_mask: Annotated[list[Annotated[int, Field(ge=0, le=1)]], Field(min_length=3, max_length=3)]


class HighCard(MultiAgentEnvironment):
    """A one-round betting game with private cards: "first" bets or folds, "second" calls or
    folds; at a showdown the higher card wins the pot (2 after a call, 1 after a bet and fold)."""

    vacancy = "forfeit"  # RFC 0016: an opponent gone past its rejoin deadline loses

    agents: ClassVar[Mapping[str, str]] = {"first": "first", "second": "second"}
    action_type = Move
    observation_type = HighCardView
    example_actions = ("bet", "fold")
    reward_sum = 0.0
    reward_range = (-2.0, 2.0)
    deterministic = True
    seeded = True
    hidden_information = True
    run_in_thread = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.cards = {"first": 0, "second": 0}
        self.history: list[Move] = []
        self.over = True

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        a, b = random.Random(seed).sample(range(1, 10), 2)
        self.cards, self.history, self.over = {"first": a, "second": b}, [], False

    def to_act(self) -> Sequence[str]:
        return [] if self.over else [("first", "second")[len(self.history)]]

    def observe(self, agent: str) -> HighCardView:
        other = "second" if agent == "first" else "first"
        shown = self.over and "fold" not in self.history
        legal = self._legal(agent) if agent in self.to_act() else ()
        return {
            "card": self.cards[agent],
            "history": list(self.history),
            "opponent_card": self.cards[other] * shown,
            "action_mask": [int(m in legal) for m in ("bet", "call", "fold")],
        }

    @staticmethod
    def _legal(agent: str) -> tuple[str, ...]:
        return ("bet", "fold") if agent == "first" else ("call", "fold")

    def step(self, actions: Mapping[str, Any]) -> WorldStep | None:
        ((agent, move),) = actions.items()
        legal = self._legal(agent)
        if move not in legal:
            raise InvalidAction(f"{agent} may {' or '.join(legal)}, not {move!r}")
        self.history.append(move)
        if move == "fold":
            self.over = True
            winner = "second" if agent == "first" else "first"
            pot = 1.0
        elif move == "call":
            self.over = True
            winner = max(self.cards, key=lambda k: self.cards[k])
            pot = 2.0
        else:
            return None
        loser = "second" if winner == "first" else "first"
        return WorldStep(rewards={winner: pot, loser: -pot}, terminated=True, metadata={"winner": winner})

    def state(self) -> dict[str, Any]:
        return {"cards": dict(self.cards), "history": list(self.history)}
