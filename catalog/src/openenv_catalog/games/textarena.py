"""TextArena games of two or more players as :class:`~openenv_catalog.games.core.Game`\\ s.

Agents are ``player_0`` .. ``player_{n-1}`` (TextArena's player ids), each in the role
TextArena gives it (``Player 0``; a secret role stays in that agent's own view). Actions are
text in the game's own syntax (``[4]``, ``[bet]``); a move the game rejects is TextArena's to
judge, as in TextArena (a warning and another try, then a loss), so the server refuses only
text over :data:`MAX_ACTION_CHARS`. An agent's observation is its own transcript: every
message TextArena addressed to it (or to all) since the reset, rendered as TextArena's
``LLMObservationWrapper`` renders it; private messages (the other player's card) never reach
the other agent. Rewards are TextArena's at the end of the game.

TextArena draws from the process-wide ``random`` generator: the game swaps its own generator
state in around every call (:meth:`TextArenaGame.generators`), so sessions never disturb
each other's games or seeds; the binding runs games on the event loop, one call at a time.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from openenv_catalog.games.core import Game

__all__ = ["MAX_ACTION_CHARS", "TextArenaGame"]

MAX_ACTION_CHARS = 2000
GAME_SENDER = -1  # TextArena's GAME_ID


def _ta() -> Any:
    from openenv_catalog.importers import ImporterUnavailable

    try:
        import textarena
    except ImportError as e:
        raise ImporterUnavailable(f"textarena is not installed: pip install 'protoenv-catalog[textarena]' ({e})") from e
    return textarena


class TextArenaGame(Game):
    """One TextArena game of ``num_players`` players (subclassed per game: ``game_id``)."""

    game_id: str = ""
    num_players: int = 2
    max_steps = 200  # world steps: the runtime truncates a game still going then
    hidden_information = True  # each agent's transcript is its own (its role, private messages)
    illegal_actions = "penalize"  # TextArena judges a move: a warning and another try, then a loss

    def __init__(self) -> None:
        self.agents = tuple(f"player_{i}" for i in range(self.num_players))
        self.action_type = {"type": "string", "maxLength": MAX_ACTION_CHARS}
        self.observation_type = {"type": "string"}
        self.roles = {a: f"Player {i}" for i, a in enumerate(self.agents)}
        self._py_rng = random.Random(0).getstate()
        self._np_rng = np.random.RandomState(0).get_state()
        super().__init__()
        self.reset(None)

    @contextlib.contextmanager
    def generators(self) -> Iterator[None]:
        saved_py, saved_np = random.getstate(), np.random.get_state()
        random.setstate(self._py_rng)
        np.random.set_state(self._np_rng)
        try:
            yield
        finally:
            self._py_rng, self._np_rng = random.getstate(), np.random.get_state()
            random.setstate(saved_py)
            np.random.set_state(saved_np)

    def reset(self, seed: int | None) -> None:
        if seed is not None:
            self._py_rng = random.Random(seed).getstate()
            self._np_rng = np.random.RandomState(seed % 2**32).get_state()
        with self.generators():
            self.env = _ta().make(self.game_id)  # fresh: TextArena's wrappers keep history across resets
            self.env.reset(num_players=self.num_players, seed=seed)
        base = self.env
        while hasattr(base, "env"):
            base = base.env
        self.base = base
        state = base.state
        self.roles = {a: str(state.role_mapping.get(i, f"Player {i}")) for i, a in enumerate(self.agents)}
        self.transcripts: dict[str, list[tuple[int, str]]] = {a: [] for a in self.agents}
        self.terminated = dict.fromkeys(self.agents, False)
        self.truncated = dict.fromkeys(self.agents, False)
        self.steps = 0
        self.reason = ""
        self._drain()

    def _drain(self) -> None:
        """Move the messages TextArena queued for each player into that player's transcript."""
        state = self.base.state
        for i, a in enumerate(self.agents):
            queued = state.observations.get(i) or []
            self.transcripts[a].extend((int(m[0]), str(m[1])) for m in queued)
            state.observations[i] = []

    def acting(self) -> list[str]:
        if self.over:
            return []
        return [self.agents[int(self.base.state.current_player_id)]]

    def observe(self, agent: str) -> str:
        names = self.base.state.role_mapping
        return "".join(
            f"\n[{'GAME' if sender == GAME_SENDER else names.get(sender, f'Player {sender}')}] {message}"
            for sender, message in self.transcripts[agent]
        )

    def illegal(self, agent: str, action: Any) -> str | None:
        if not isinstance(action, str):
            return f"an action is text, not {type(action).__name__}"
        if len(action) > MAX_ACTION_CHARS:
            return f"an action is at most {MAX_ACTION_CHARS} characters"
        return None

    def apply(self, actions: Mapping[str, Any]) -> dict[str, float]:
        (agent,) = self.acting()
        with self.generators():
            done, _ = self.env.step(str(actions[agent]))
        self.steps += 1
        self._drain()
        rewards = dict.fromkeys(self.agents, 0.0)
        if done:
            got = self.base.state.rewards or {}
            for i, a in enumerate(self.agents):
                try:
                    rewards[a] = float(got.get(i, 0.0))
                except (TypeError, ValueError):
                    rewards[a] = 0.0
            info = self.base.state.game_info or {}
            self.reason = str((info.get(0) or {}).get("reason", ""))
            self.terminated = dict.fromkeys(self.agents, True)
        return rewards

    def public_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"game": self.game_id, "to_act": self.acting(), "steps": self.steps}
        if self.reason:
            out["reason"] = self.reason
        return out
