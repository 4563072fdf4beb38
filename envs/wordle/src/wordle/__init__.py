"""A Wordle-style word game for openenv (:class:`WordleEnvironment`)."""

from wordle.game import answers, feedback, words
from wordle.server import WordleEnvironment

__all__ = ["WordleEnvironment", "answers", "feedback", "words"]
