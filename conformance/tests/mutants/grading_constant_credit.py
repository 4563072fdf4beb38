"""Rule broken: no partial credit for a constant (RFC 0015, docs/protocol.md §7.1). The grader
pays 0.25 for a submission that loads and defines ``f`` (shaping, as coding_env's former "loads"
gate did), so a function returning a constant earns more than the null solution (the empty
submission, 0). Deterministic: the credit depends on the submission loading."""

from mutants.gradinglib import LEVELS, Quiz
from openenv.sandbox import FunctionResult

CAUGHT_BY = "grading.constant_answers"
# The answer table (None everywhere) loads too; forgeries that define f before they end the
# verifier may load as well.
COLLATERAL = frozenset({"grading.replay", "grading.verdict_forgery"})
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    def verdict(self, passed: int, total: int, r: FunctionResult) -> float:
        loads = r.load_error is None and not r.timed_out
        return (0.25 if loads else 0.0) + (0.75 if passed == total else 0.0)
