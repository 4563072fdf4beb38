"""Rule broken: the environment's reference solution earns the top reward (RFC 0015,
``Environment.grading_probes``). The grader expects one more than f(3) for the last hidden case,
so no correct solution is ever paid. Deterministic."""

from mutants.gradinglib import LEVELS, Quiz

CAUGHT_BY = "grading.reference"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    def expected(self, x: int) -> int:
        return super().expected(x) + (1 if x == 3 else 0)
