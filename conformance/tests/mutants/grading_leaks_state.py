"""Rule broken: the environment keeps its state like strict feedback, nothing of the verdict but
the reward (RFC 0015, docs/protocol.md §7.1). ``state()`` carries the pass count of the last
submission. Deterministic: a constant answer passes the same cases in any order."""

from mutants.gradinglib import LEVELS, Quiz

CAUGHT_BY = "grading.feedback"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    def state(self) -> dict:
        return {**super().state(), "passed": self.passed}
