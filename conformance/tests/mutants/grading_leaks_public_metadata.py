"""Rule broken: strict feedback tells nothing finer than the reward (RFC 0015, docs/protocol.md
§7.1, rule 3). The environment declares the pass count a public metadata key (``passed``), so
strict episodes show how many hidden cases a wrong submission passed. Deterministic: a constant
answer passes the same cases in any order."""

import openenv
from mutants.gradinglib import LEVELS, Quiz

CAUGHT_BY = "grading.feedback"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    grading = openenv.Grading(feedback="strict", offers=("strict", "rich"), public_metadata=("steps", "passed"))

    def step_metadata(self) -> dict:
        return {"steps": self.steps, "passed": self.passed}
