"""Rule broken: an environment that grades marks its grading tools (RFC 0015, docs/protocol.md
§7.1). It declares ``grading`` (so ``Capabilities.grades`` is set) but ``submit`` carries no
grading annotation: the runtime cannot hold it to strict feedback, so its results (pass counts)
reach the agent, also as side calls, as often as it is called. Deterministic."""

from typing import Any

import openenv
from mutants.gradinglib import LEVELS, Quiz

CAUGHT_BY = "grading.declared"
# Its graded step answers the pass counts, which strict feedback's shape check sees too.
COLLATERAL = frozenset({"grading.feedback"})
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    @openenv.tool(timeout_s=30.0)
    def submit(self, code: str) -> dict[str, Any]:
        """Grade f on the hidden cases; this ends the episode.

        Args:
            code: Python source defining f.
        """
        self.verdict_value, self.passed = self.grade(code)
        return {"passed": self.passed, "total": 3}
