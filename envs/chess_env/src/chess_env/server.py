"""Chess against Stockfish (:class:`ChessEnvironment`), or agent against agent (:class:`ChessDuelEnvironment`).

Against the engine: the agent plays one side, the engine the other.

Every step is a tool call: ``move(uci)`` plays a move in UCI (``e2e4``, ``e7e8q``) or SAN
(``Nf3``); the engine answers at once; ``legal_moves()`` and ``board()`` (FEN and an ASCII
diagram) read the position. Illegal moves are refused (an ``is_error`` result, not a move).
The episode ends with the game: reward +1 for a win, 0 for a draw, -1 for a loss, from the
agent's side. Options (handshake or reset): ``color`` (``"white"``/``"black"``, default
white; seeded at random when ``"random"``), ``skill`` (Stockfish's Skill Level, 0-20, default
0), ``movetime_ms`` (engine thinking time per move, default 20). The engine is Debian's
``stockfish`` (``/usr/games/stockfish``, or ``STOCKFISH_PATH``), one process per session.

Agent against agent (a multi-agent world, RFC 0012): two agents, ``white`` and ``black``, move
in turn; one session may play both (self-play) or each side joins from its own client.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
from collections.abc import Mapping
from typing import Any, ClassVar, TypedDict

import chess
import chess.engine
import chess.svg

import openenv

MAX_PLIES = 400


def engine_path() -> str:
    """Where Stockfish is: ``$STOCKFISH_PATH``, ``stockfish`` on PATH, or Debian's /usr/games."""
    for candidate in (os.environ.get("STOCKFISH_PATH"), shutil.which("stockfish"), "/usr/games/stockfish"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("Stockfish is not installed (Debian: apt-get install stockfish)")


class ChessEnvironment(openenv.Environment):
    """Play chess against Stockfish, one move per step."""

    name = "chess_env"
    version = "0.1.0"
    description = "Chess against Stockfish (strength as an option); moves as tool calls; reward by outcome."
    deterministic = False  # Stockfish's choices depend on timing (movetime) and threads
    max_sessions = 8
    max_episode_steps = MAX_PLIES
    reward_range = (-1.0, 1.0)
    example_actions = (
        openenv.CallToolAction("legal_moves", {}),
        openenv.CallToolAction("move", {"move": "e2e4"}),
    )
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "kind": "game", "engine": "stockfish"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        engine_path()  # fail the session at once when Stockfish is missing
        self._engine: chess.engine.SimpleEngine | None = None  # started at its first move
        self._start(options.get("seed"), options)

    @property
    def engine(self) -> chess.engine.SimpleEngine:
        if self._engine is None:
            self._engine = chess.engine.SimpleEngine.popen_uci(engine_path())
            self._engine.configure({"Threads": 1, "Hash": 16})
        return self._engine

    def _start(self, seed: Any, options: Mapping[str, Any]) -> None:
        opts = {**self.options, **options}
        try:
            skill = int(opts.get("skill", 0))
            movetime = int(opts.get("movetime_ms", 20))
            color = str(opts.get("color", "white")).lower()
        except (TypeError, ValueError) as e:
            raise openenv.InvalidArgument(f"bad options: {e}") from None
        if not 0 <= skill <= 20 or not 1 <= movetime <= 5000 or color not in ("white", "black", "random"):
            raise openenv.InvalidArgument("options: skill 0-20, movetime_ms 1-5000, color white|black|random")
        if color == "random":
            color = random.Random(seed).choice(("white", "black"))
        self.skill = skill
        self.limit = chess.engine.Limit(time=movetime / 1000)
        self.color = chess.WHITE if color == "white" else chess.BLACK
        self.board_ = chess.Board()
        self.result: str | None = None
        if self.color == chess.BLACK:
            self._engine_move()

    def _engine_move(self) -> str:
        played = self.engine.play(self.board_, self.limit, options={"Skill Level": self.skill}).move
        assert played is not None
        san = self.board_.san(played)
        self.board_.push(played)
        return san

    def _outcome(self) -> float | None:
        outcome = self.board_.outcome(claim_draw=True)
        if outcome is None:
            return None
        self.result = outcome.result()
        return 0.0 if outcome.winner is None else (1.0 if outcome.winner == self.color else -1.0)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(seed, options or {})
        side = "white" if self.color == chess.WHITE else "black"
        text = f"You play {side} against Stockfish. Position (FEN): {self.board_.fen()}"
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(obs, metadata={"color": side, "fen": self.board_.fen()})

    @openenv.tool(annotations={"readOnlyHint": True})
    def board(self) -> dict[str, str]:
        """The position: FEN and an ASCII diagram (white's view, upper case white)."""
        return {"fen": self.board_.fen(), "ascii": str(self.board_)}

    @openenv.tool(annotations={"readOnlyHint": True})
    def legal_moves(self) -> list[str]:
        """The legal moves of the position, in UCI."""
        return [m.uci() for m in self.board_.legal_moves]

    @openenv.tool
    def move(self, move: str) -> dict[str, Any]:
        """Play a move; the engine replies at once.

        Args:
            move: UCI (e2e4, e7e8q) or SAN (Nf3, O-O).
        """
        if self.result is not None:
            raise ValueError("the game is over")
        try:
            m = (
                self.board_.parse_uci(move)
                if len(move) in (4, 5) and move[1].isdigit()
                else self.board_.parse_san(move)
            )
        except ValueError:
            raise ValueError(f"{move!r} is not a legal move here; legal: {' '.join(self.legal_moves())}") from None
        self.board_.push(m)
        out: dict[str, Any] = {"played": m.uci()}
        if self._outcome() is None:
            out["engine"] = self._engine_move()
            self._outcome()
        out["fen"] = self.board_.fen()
        if self.result is not None:
            out["result"] = self.result
        return out

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        reward = self._outcome() if action.tool_name == "move" else None
        done = reward is not None
        return openenv.StepResult(observation, reward=reward if done else 0.0, terminated=done)

    def state(self) -> dict[str, Any]:
        return {"fen": self.board_.fen(), "result": self.result, "plies": self.board_.ply()}

    def render(self) -> str:
        """The position as an SVG picture (the ``/web`` playground shows it)."""
        return str(chess.svg.board(getattr(self, "board_", None) or chess.Board(), size=360))

    def close(self) -> None:
        """Stop Stockfish without waiting on it. Not ``SimpleEngine.quit()``: it waits, with no
        bound, for an answer from python-chess's event-loop thread, and when that loop ends at
        the same moment (the engine exiting) the answer never comes: a test run hung there in
        CI. ``close()`` kills the engine process and ends the loop as soon as possible; it
        raises nothing when the engine has already gone."""
        engine, self._engine = self._engine, None
        if engine is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed: nothing left to stop
                engine.close()


class DuelView(TypedDict):
    """One side's view: the position (FEN, and an ASCII diagram from white's side), the moves it
    may play now in UCI (empty when it is the other side's turn), and the last move played."""

    fen: str
    ascii: str
    legal_moves: list[str]
    last_move: str


class ChessDuelEnvironment(openenv.MultiAgentEnvironment):
    """Chess for two agents: ``white`` and ``black`` move in turn; reward by outcome."""

    name = "chess_duel"
    version = "0.1.0"
    description = "Chess for two agents (white, black), turn by turn; UCI or SAN moves; +1/-1 by outcome, 0 a draw."
    agents: ClassVar[Mapping[str, str]] = {"white": "white", "black": "black"}
    agent_descriptions: ClassVar[Mapping[str, str]] = {"white": "moves first", "black": "moves second"}
    action_type: ClassVar[Any] = {"type": "string", "minLength": 2, "maxLength": 12}
    observation_type = DuelView
    reward_sum = 0.0
    reward_range = (-1.0, 1.0)
    deterministic = True
    max_episode_steps = MAX_PLIES
    max_sessions = 64
    run_in_thread = False  # python-chess answers in microseconds
    example_actions = ("e2e4", "Nf3", "d4")
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "kind": "game"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.board_ = chess.Board()
        self.result: str | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        self.board_ = chess.Board()
        self.result = None

    def _side(self, agent: str) -> chess.Color:
        return chess.WHITE if agent == "white" else chess.BLACK

    def to_act(self) -> list[str]:
        if self.result is not None:
            return []
        return ["white" if self.board_.turn == chess.WHITE else "black"]

    def observe(self, agent: str) -> DuelView:
        mine = agent in self.to_act()
        last = self.board_.peek().uci() if self.board_.move_stack else ""
        return {
            "fen": self.board_.fen(),
            "ascii": str(self.board_),
            "legal_moves": [m.uci() for m in self.board_.legal_moves] if mine else [],
            "last_move": last,
        }

    def step(self, actions: Mapping[str, Any]) -> openenv.WorldStep | None:  # type: ignore[override]
        ((agent, move),) = actions.items()
        try:
            m = (
                self.board_.parse_uci(move)
                if len(move) in (4, 5) and move[1].isdigit()
                else self.board_.parse_san(move)
            )
        except ValueError:
            legal = " ".join(x.uci() for x in self.board_.legal_moves)
            raise openenv.InvalidAction(f"{move!r} is not a legal move for {agent} here; legal: {legal}") from None
        self.board_.push(m)
        outcome = self.board_.outcome(claim_draw=True)
        if outcome is None:
            return None
        self.result = outcome.result()
        other = "black" if agent == "white" else "white"
        if outcome.winner is None:
            rewards = {agent: 0.0, other: 0.0}
        else:
            winner = "white" if outcome.winner == chess.WHITE else "black"
            rewards = {winner: 1.0, ("black" if winner == "white" else "white"): -1.0}
        return openenv.WorldStep(
            rewards=rewards,
            terminated=True,
            metadata={"result": self.result, "termination": outcome.termination.name.lower()},
        )

    def state(self) -> dict[str, Any]:
        return {"fen": self.board_.fen(), "result": self.result, "plies": self.board_.ply()}

    def render(self) -> str:
        """The position as an SVG picture (the ``/web`` playground shows it)."""
        return str(chess.svg.board(getattr(self, "board_", None) or chess.Board(), size=360))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the chess environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(ChessEnvironment, ns.host, ns.port, ready=lambda s: print(f"chess_env serving on {s.address}"))


if __name__ == "__main__":
    main()
