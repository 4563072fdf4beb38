"""Rule broken: hidden cases in a fresh order per submission, and no partial credit that can be
farmed (RFC 0015, docs/protocol.md §7.1). The cases run in a fixed order and the reward is the
fraction passed, so an answer table keyed on a call counter learns the answers position by
position (issue 46's coding_env finding). None of the level's constants (0, 1, -1, ...) passes a
case (the answers are 4 to 13). Deterministic: the order never changes."""

from mutants.gradinglib import HIDDEN, LEVELS, Quiz
from openenv.sandbox import FunctionResult

CAUGHT_BY = "grading.replay"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    def order(self) -> list[int]:
        return list(HIDDEN)

    def verdict(self, passed: int, total: int, r: FunctionResult) -> float:
        return passed / total
