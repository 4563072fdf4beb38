"""Rule broken: with Capabilities.deterministic, an episode depends on its seed and actions,
not on its episode id (docs/protocol.md §1.3). The counter mixes the episode id into its
generator's seed: replaying a seed under the same client-chosen id gives the same episode,
under another id (or a server-generated one) another."""

import random
import zlib

from mutants.base import Counter

CAUGHT_BY = "determinism.episode_id_independent"
COLLATERAL = frozenset(
    {
        "concurrency.isolation",
        "parity.grpc_vs_http",
        "vector.autoreset_modes",
        "vector.batch_matches_sequential",
    }
)


class Env(Counter):
    def reset(self, *, seed=None, episode_id=None, options=None):
        self.rng = random.Random((seed or 0) ^ zlib.crc32((episode_id or "").encode()))
        self.value = self.rng.randrange(-2, 3)
        return {"value": self.value}
