"""Not a mutant: a correct environment on which some rules can never be exercised, the
subject of ``test_no_check_passes_what_it_did_not_exercise``. Its episodes never end (no
termination, no ``max_episode_steps``), so no step after an end can be sent, and its steps run
on the event loop and answer at once, so no step ever outlives a timeout. A check whose rule
needs one of those must say ``not_exercised``, never ``pass``."""

from typing import Any

import openenv
from mutants.base import Counter

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()


class Env(Counter):
    max_episode_steps = None
    run_in_thread = False

    def step(self, action: dict[str, Any]) -> openenv.StepResult:
        delta = action["delta"]
        if delta == 0:
            raise openenv.InvalidAction("delta must not be 0")
        self.value = max(-5, min(5, self.value + delta))  # never reaches |6|: never terminates
        return openenv.StepResult(self.observe(), reward=float(delta))
