"""A Wordle-style word game: guess the secret five-letter word in six tries.

Every step is a tool call: ``guess(word)`` answers the feedback (``G`` right place, ``Y``
elsewhere in the word, ``.`` absent) and the guesses left; the episode ends when the word is
found or after the sixth guess. A guess that is not a known five-letter word is refused (an
``is_error`` result, not counted). ``reset(seed=s)`` draws the same secret on every machine;
``options={"word": ...}`` sets it. The reward, on the last guess, is the rubric of
:func:`build_rubric`: 1 for a solve, less 0.1 per extra guess; an unsolved game gets
partial credit from its best guess.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping
from typing import Any, ClassVar

import openenv
from openenv.rubrics import Score, WeightedSum, leaf
from wordle.game import answers, feedback, words

MAX_GUESSES = 6


@leaf(minimum=0, maximum=1)
def solved(action: Any, observation: Any, env: Any) -> Score:
    """The game ended with the word found."""
    ok = env.over and env.won
    return Score(1.0 if ok else 0.0, reason=f"solved in {len(env.guesses)}" if ok else "")


@leaf(minimum=0, maximum=1)
def extra_guesses(action: Any, observation: Any, env: Any) -> float:
    """Guesses a solve took beyond the first, per 5."""
    return (len(env.guesses) - 1) / 5 if env.over and env.won else 0.0


@leaf(minimum=0, maximum=1)
def best_marks(action: Any, observation: Any, env: Any) -> float:
    """For an unsolved game at its end: the best guess's marks, 2 per G and 1 per Y, over 10."""
    if not env.over or env.won:
        return 0.0
    return max((2 * f.count("G") + f.count("Y")) / 10 for f in env.marks) if env.marks else 0.0


def build_rubric() -> WeightedSum:
    return WeightedSum(
        [solved, extra_guesses, best_marks],
        [1.0, -0.5, 0.4],
        name="reward",
        description="1 for a solve less 0.1 per extra guess; else 0.4 x the best guess's marks.",
    )


class WordleEnvironment(openenv.Environment):
    """Guess the five-letter word in six tries, with letter-by-letter feedback."""

    name = "wordle"
    version = "0.1.0"
    description = "A Wordle-style word game: six guesses, G/Y/. feedback, seeded secrets, partial credit."
    deterministic = True
    run_in_thread = False
    max_sessions = 256
    max_episode_steps = 30
    rubric = build_rubric()
    reward_range = (0.0, 1.0)
    example_actions = (openenv.CallToolAction("guess", {"word": "about"}),)
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "kind": "game", "tasks": len(answers())}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._start(options.get("seed"), options)

    def _start(self, seed: Any, options: Mapping[str, Any]) -> None:
        word = options.get("word")
        if word is not None:
            if not isinstance(word, str) or word.lower() not in words():
                raise openenv.InvalidArgument(f"option word={word!r} is not a known five-letter word")
            self.secret = word.lower()
        else:
            try:
                rng = random.Random(None if seed is None else int(seed))
            except (TypeError, ValueError):
                raise openenv.InvalidArgument(f"bad seed {seed!r}") from None
            self.secret = rng.choice(answers())
        self.guesses: list[str] = []
        self.marks: list[str] = []
        self.won = False
        self.over = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(seed, options or {})
        text = f"Guess the secret five-letter word in {MAX_GUESSES} tries with guess(word)."
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(obs, metadata={"guesses_left": MAX_GUESSES})

    @openenv.tool
    def guess(self, word: str) -> dict[str, Any]:
        """Guess a word: the feedback is one mark per letter (G right place, Y elsewhere, . absent).

        Args:
            word: a five-letter English word.
        """
        w = word.strip().lower()
        if self.over:
            raise ValueError("the game is over")
        if len(w) != 5 or w not in words():
            raise ValueError(f"{word!r} is not a known five-letter word")
        marks = feedback(w, self.secret)
        self.guesses.append(w)
        self.marks.append(marks)
        self.won = marks == "GGGGG"
        self.over = self.won or len(self.guesses) >= MAX_GUESSES
        out: dict[str, Any] = {"word": w, "feedback": marks, "guesses_left": MAX_GUESSES - len(self.guesses)}
        if self.over and not self.won:
            out["secret"] = self.secret
        return out

    @openenv.tool(annotations={"readOnlyHint": True})
    def history(self) -> list[dict[str, str]]:
        """The guesses so far with their feedback."""
        return [{"word": g, "feedback": m} for g, m in zip(self.guesses, self.marks, strict=True)]

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        return openenv.StepResult(observation, terminated=self.over and action.tool_name == "guess")

    def state(self) -> dict[str, Any]:
        return {"guesses": list(self.guesses), "feedback": list(self.marks), "won": self.won, "over": self.over}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the Wordle environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(WordleEnvironment, ns.host, ns.port, ready=lambda s: print(f"wordle serving on {s.address}"))


if __name__ == "__main__":
    main()
