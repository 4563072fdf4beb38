"""The healthy grading environment (mutants/gradinglib.py's ``Quiz``): every rule of
docs/protocol.md §7.1 kept, so it passes the ``grading`` level (test_grading_level.py). Not a
mutant: the ``grading_*`` mutants each break one of its defences."""

from mutants.gradinglib import LEVELS, Quiz

Env = Quiz
CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]
