"""tally: small counting and text helpers (the factory tests' package)."""

from tally.core import clamp, mean, running_total, window
from tally.text import initials, pad, title_words

__all__ = ["clamp", "initials", "mean", "pad", "running_total", "title_words", "window"]
