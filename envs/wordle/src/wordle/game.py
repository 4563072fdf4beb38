"""Wordle's rules: feedback for a guess, and the shipped word lists.

``words.txt``: the 5-letter words of reasoning-gym's ``words3to10.txt`` (Apache-2.0), the
guesses accepted. ``answers.txt``: those of them that appear in lower case in the public
domain story ``In the Year 2889`` (shipped by reasoning-gym): common words, the secrets.
"""

from __future__ import annotations

import functools
from collections import Counter
from importlib import resources

__all__ = ["answers", "feedback", "words"]


@functools.cache
def words() -> frozenset[str]:
    return frozenset(resources.files("wordle").joinpath("words.txt").read_text().split())


@functools.cache
def answers() -> tuple[str, ...]:
    return tuple(resources.files("wordle").joinpath("answers.txt").read_text().split())


def feedback(guess: str, secret: str) -> str:
    """One mark per letter: ``G`` right letter in the right place, ``Y`` in the word
    elsewhere (as many times as it occurs there, greens first), ``.`` not in the word."""
    marks = ["."] * len(guess)
    left = Counter(s for g, s in zip(guess, secret, strict=True) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
        elif left[g] > 0:
            marks[i] = "Y"
            left[g] -= 1
    return "".join(marks)
