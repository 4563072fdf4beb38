"""``textarena:GAME[:PLAYERS]``: a TextArena game as an openenv environment.

A game of two or more players (``TicTacToe-v0``, ``KuhnPoker-v0``; ``Poker-v0:4`` for four)
is served as a multi-agent environment, each player an agent in its TextArena role
(:mod:`openenv_catalog.games.textarena`); a single-player game as below.

Single-player games: actions and observations are text (TextArena's own move syntax, e.g. ``[3 4]``); the reward
is TextArena's at the end of the game (0 on the steps before). ``reset(seed=s)`` seeds the
game. TextArena games draw from the process-wide ``random`` (and NumPy's) generator, so each
session keeps its own generator state, swapped in around every call, and calls run on the
event loop one at a time (``run_in_thread = False``): sessions never disturb each other's
games or seeds.

Games that need NLTK corpora (Wordle, Hangman, ...) download them at first use and cannot
run offline; the catalog lists only games that work with the package alone, and its own
``envs/wordle`` ships a word list instead.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

import openenv
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CURATED", "TextArenaEnvironment", "load"]

_RESET_ATTEMPTS = 8

CURATED = (
    "GuessTheNumber-v0",
    "Minesweeper-v0",
    "TowerOfHanoi-v0",
    "LightsOut-v0",
    "FifteenPuzzle-v0",
    "Mastermind-v0",
    "Sudoku-v0-very-easy",
    "FrozenLake-v0",
    "PegJump-v0",
    "2048-v0",
    # More single-player games of TextArena 0.7 and their variants (a seed gives one game).
    "2048-v0-3x3",
    "2048-v0-5x5",
    "2048-v0-easy",
    "2048-v0-hard",
    "Bandit-v0",
    "Bandit-v0-hard",
    "Blackjack-v0",
    "Blackjack-v0-long",
    "Countdown-v0",
    "Crosswords-v0",
    "Crosswords-v0-hardcore",
    "Cryptarithm-v0",
    "FrozenLake-v0-hardcore",
    "FrozenLake-v0-random",
    "GuessTheNumber-v0-hardcore",
    "LogicPuzzle-v0",
    "LogicPuzzle-v0-hard",
    "Mastermind-v0-extreme",
    "Mastermind-v0-hard",
    "Minesweeper-v0-hard",
    "Minesweeper-v0-medium",
    "Minesweeper-v0-small",
    "Secretary-v0",
    "Secretary-v0-long",
    "Slitherlink-v0",
    "Sudoku-v0",
    "Sudoku-v0-easy",
    "Sudoku-v0-medium",
    "ThreeCardMonte-v0",
    "TowerOfHanoi-v0-extreme",
    "TowerOfHanoi-v0-hard",
    "TowerOfHanoi-v0-hardcore",
    "TowerOfHanoi-v0-medium",
    # Two players: a multi-agent environment (openenv_catalog.games.textarena). Others import as
    # well (KuhnPoker-v0, ConnectFour-v0, ...); each listed one costs a certification in CI.
    "TicTacToe-v0",
)
MAX_ACTION_CHARS = 2000


def _ta() -> Any:
    try:
        import textarena
    except ImportError as e:
        raise ImporterUnavailable(f"textarena is not installed: pip install 'protoenv-catalog[textarena]' ({e})") from e
    return textarena


def _text(obs: Any) -> str:
    if isinstance(obs, str):
        return obs
    if isinstance(obs, (list, tuple)):  # some wrappers give [(sender, message, kind), ...]
        return "\n".join(str(m[1]) if isinstance(m, (list, tuple)) and len(m) > 1 else str(m) for m in obs)
    return str(obs)


def _reward(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):  # some games report a message where the reward belongs
        return 0.0


class TextArenaEnvironment(openenv.Environment):
    """Base of imported TextArena games (one subclass per game id, made by :func:`load`)."""

    game_id: ClassVar[str] = ""
    deterministic = True
    run_in_thread = False  # see the module docstring: generator state is swapped per call
    max_sessions = 64
    max_episode_steps = 200
    action_type: ClassVar[Any] = {"type": "string", "maxLength": MAX_ACTION_CHARS}
    observation_type: ClassVar[Any] = {"type": "string"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._py_rng = random.Random(0).getstate()
        self._np_rng = np.random.RandomState(0).get_state()
        with self._own_generators():
            self.env = _ta().make(self.game_id)
        self.done = False

    @contextlib.contextmanager
    def _own_generators(self) -> Iterator[None]:
        saved_py, saved_np = random.getstate(), np.random.get_state()
        random.setstate(self._py_rng)
        np.random.set_state(self._np_rng)
        try:
            yield
        finally:
            self._py_rng, self._np_rng = random.getstate(), np.random.get_state()
            random.setstate(saved_py)
            np.random.set_state(saved_np)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        if seed is not None:
            self._py_rng = random.Random(seed).getstate()
            self._np_rng = np.random.RandomState(seed % 2**32).get_state()
        with self._own_generators():
            for attempt in range(_RESET_ATTEMPTS):
                self.env = _ta().make(self.game_id)  # fresh: TextArena's wrappers keep history across resets
                try:
                    self.env.reset(num_players=1, seed=seed)
                    break
                except ZeroDivisionError:
                    # TextArena's LightsOut (0.7) divides by the lights its scramble left on, which
                    # may be none (about 1 reset in 10^4): the game is drawn again from the
                    # generator's next state, so a seed still gives one game.
                    if attempt == _RESET_ATTEMPTS - 1:
                        raise
            _, obs = self.env.get_observation()
        self.done = False
        return openenv.StepResult(_text(obs), metadata={"game": self.game_id})

    def step(self, action: Any) -> openenv.StepResult:
        with self._own_generators():
            done, _ = self.env.step(str(action))
            reward = 0.0
            meta: dict[str, Any] = {}
            if done:
                rewards, game_info = self.env.close()
                reward = _reward((rewards or {}).get(0, 0.0))
                info0 = (game_info or {}).get(0, {})
                meta = {k: v for k, v in info0.items() if isinstance(v, (str, int, float, bool))}
                obs = str(info0.get("reason", "The game is over."))
            else:
                _, obs = self.env.get_observation()
        self.done = bool(done)
        return openenv.StepResult(_text(obs), reward=reward, terminated=bool(done), metadata=meta)

    def state(self) -> dict[str, Any]:
        return {"game": self.game_id, "done": self.done}


def _players(game_id: str) -> int:
    """How many players ``game_id`` takes: the fewest its ``reset`` accepts (1, then 2)."""
    saved_py, saved_np = random.getstate(), np.random.get_state()
    try:
        for n in (1, 2):
            try:
                _ta().make(game_id).reset(num_players=n, seed=0)
                return n
            except AssertionError:  # TextArena asserts the number of players it takes
                continue
    finally:
        random.setstate(saved_py)
        np.random.set_state(saved_np)
    raise LookupError(f"textarena's {game_id!r} takes neither 1 nor 2 players: name the count, {game_id}:N")


def load(spec: str) -> type[Any]:
    """The environment class of the TextArena game ``spec`` (``GAME`` or ``GAME:PLAYERS``)."""
    from textarena.envs.registration import ENV_REGISTRY

    _ta()
    game_id, _, count = spec.partition(":")
    if game_id not in ENV_REGISTRY:
        raise LookupError(f"textarena has no game {game_id!r}")
    if count and not (count.isdigit() and 1 <= int(count) <= 16):
        raise ValueError(f"{spec!r}: the number of players is 1 to 16 ({game_id}:2)")
    players = int(count) if count else _players(game_id)
    ident = re.sub(r"[^a-z0-9]+", "-", spec.lower()).strip("-")
    if players > 1:
        return _multiplayer(game_id, players, ident)
    attrs: dict[str, Any] = {
        "name": f"textarena-{ident}",
        "game_id": game_id,
        "version": "0.7",
        "description": f"TextArena's {game_id}, imported: a single-player text game, rewarded at its end.",
        "example_actions": ("[1]", "[2 3]"),
        "metadata": {"source": f"textarena:{game_id}", "kind": "text-game"},
    }
    return type(f"TextArena_{ident.replace('-', '_')}", (TextArenaEnvironment,), attrs)


def _multiplayer(game_id: str, players: int, ident: str) -> type[Any]:
    from openenv_catalog.games.bind import environment
    from openenv_catalog.games.textarena import TextArenaGame

    try:
        _ta().make(game_id).reset(num_players=players, seed=0)
    except AssertionError as e:
        raise LookupError(f"textarena's {game_id!r} cannot take {players} players: {e}") from None
    game_cls = type(
        f"TextArenaGame_{ident.replace('-', '_')}", (TextArenaGame,), {"game_id": game_id, "num_players": players}
    )
    return environment(
        game_cls,
        name=f"textarena-{ident}",
        version="0.7",
        description=(
            f"TextArena's {game_id}, imported: {players} agents, turn by turn, text moves, rewarded at the end."
        ),
        source=f"textarena:{game_id}" + (f":{players}" if players != 2 else ""),
        kind="text-game",
        example_actions=("[1]", "[4]", "[check]"),
        threaded=False,
    )
