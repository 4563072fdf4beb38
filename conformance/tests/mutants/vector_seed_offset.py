"""Rule broken: batch_reset with one seed s seeds the k-th reset instance with s + k
(docs/protocol.md §3.9). This server seeds every instance with s, so a batch of N instances
plays N copies of one episode instead of N plain sessions seeded s..s+N-1."""

from mutants.base import Counter as Env
from openenv.runtime.vector import VectorSession

CAUGHT_BY = "vector.batch_matches_sequential"
COLLATERAL: frozenset[str] = frozenset()


class Vector(VectorSession):
    async def reset(self, env_ids, seeds, options, task_ids=()):
        if len(seeds) == 1:
            seeds = [seeds[0]] * len(self._ids(env_ids))
        return await super().reset(env_ids, seeds, options, task_ids)


__all__ = ["Env", "Vector"]
