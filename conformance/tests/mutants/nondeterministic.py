"""Rule broken: with Capabilities.deterministic, the same seed and actions give the same
observations (docs/protocol.md §1.3). Observations carry unseeded noise."""

import random

from mutants.base import Counter

CAUGHT_BY = "determinism.same_seed"
COLLATERAL = frozenset(
    {
        "concurrency.isolation",
        "determinism.episode_id_independent",
        "lifecycle.state_read_only",
        "parity.grpc_vs_http",
        "sessions.forks_independent",
        "sessions.restore_reproduces",
        "vector.batch_matches_sequential",
    }
)


class Env(Counter):
    def observe(self):
        return {"value": self.value, "noise": random.random()}

    def reset(self, *, seed=None, episode_id=None, options=None):
        super().reset(seed=seed, episode_id=episode_id, options=options)
        return self.observe()
