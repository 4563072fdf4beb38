"""Rule broken: no timings of hidden runs reach the agent (RFC 0015, docs/protocol.md §7.1): a
public metadata key carries the grading run's time (tenths of a second), a channel a submission
that sleeps in proportion to a hidden argument reads it through. Deterministic in its verdict:
the level's submission that sleeps 1.5 s always shows a longer time than a null one."""

import time

import openenv
from mutants.gradinglib import LEVELS, Quiz

CAUGHT_BY = "grading.feedback"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    grading = openenv.Grading(feedback="strict", offers=("strict", "rich"), public_metadata=("steps", "run_s"))
    run_s = 0.0

    def grade(self, code: str) -> tuple[float, int]:
        t0 = time.monotonic()
        try:
            return super().grade(code)
        finally:
            self.run_s = round(time.monotonic() - t0, 1)

    def step_metadata(self) -> dict:
        return {"steps": self.steps, "run_s": self.run_s}
