"""The healthy step-grading environment (mutants/gradinglib.py's ``Steps``): its actions are not
tool calls and every step is graded; its probes are its own actions. Not a mutant: it passes the
``grading`` level's reference and replay checks, the others not exercised (no declared
submission to vary)."""

from mutants.gradinglib import LEVELS, Steps

Env = Steps
CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]
