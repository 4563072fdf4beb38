"""Rule broken: task contents vary with the seed wherever the task family allows (RFC 0015,
docs/protocol.md §7.1). Every seed plays the same sum, so another instance's literal answer (a
probe's replay) is this one's, and memorising across episodes pays (issue 46's terminal_env
finding: fixed task contents guessed across episodes). Deterministic."""

from typing import Any

from mutants.gradinglib import LEVELS, PROBE_SEEDS, Steps

CAUGHT_BY = "grading.replay"
# The probes' references of the other seeds answer another sum than the one always played.
COLLATERAL = frozenset({"grading.reference"})
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Steps):
    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> Any:
        return super().reset(seed=PROBE_SEEDS[1], episode_id=episode_id, options=options)
