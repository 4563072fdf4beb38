"""Environments that ``openenv play``'s tests play in a terminal (python/tests/test_play.py):
a text game whose observation is a multi-line board, and a tool environment with a tool that
takes no arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import openenv


class Board(openenv.Environment):
    """A text game: the observation is a board of several lines, the action a line of text."""

    name = "board"
    version = "0.1.0"
    action_type: ClassVar[Any] = {"type": "string", "maxLength": 20}
    observation_type: ClassVar[Any] = {"type": "string"}
    max_episode_steps = 5
    run_in_thread = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self.moves: list[str] = []
        return openenv.StepResult(self._board())

    def step(self, action: str) -> openenv.StepResult:
        self.moves.append(action)
        return openenv.StepResult(self._board(), reward=1.0, terminated=action == "end")

    def _board(self) -> str:
        last = self.moves[-1] if self.moves else "-"
        return f"+---+\n|x.o|\n|.x.|\n+---+\nlast move: {last}"


class Notes(openenv.Environment):
    """A tool environment: ``add(text)`` keeps a note, ``show()`` (no arguments) lists them."""

    name = "notes"
    version = "0.1.0"
    max_episode_steps = 10
    run_in_thread = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self.notes: list[str] = []
        intro = openenv.ToolResult([{"type": "text", "text": "Take notes.\nTools: add, show."}])
        return openenv.StepResult(openenv.CallToolObservation("", intro))

    @openenv.tool
    def add(self, text: str) -> str:
        """Keep a note.

        Args:
            text: the note.
        """
        self.notes.append(text)
        return f"{len(self.notes)} notes"

    @openenv.tool
    def show(self) -> str:
        """Every note, one per line."""
        return "\n".join(self.notes) or "(none)"


class Contacts(openenv.Environment):
    """A tool environment: ``save(name, phone, city, note="")`` keeps a contact."""

    name = "contacts"
    version = "0.1.0"
    max_episode_steps = 10
    run_in_thread = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        return openenv.StepResult(openenv.CallToolObservation())

    @openenv.tool
    def save(self, name: str, phone: str, city: str, note: str = "") -> str:
        """Keep a contact.

        Args:
            name: their name.
            phone: their number.
            city: where they live.
            note: anything else.
        """
        return f"{name}, {phone}, {city}" + (f" ({note})" if note else "")
