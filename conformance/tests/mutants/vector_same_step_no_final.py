"""Rule broken: with AUTORESET_MODE_SAME_STEP the step that ends an episode reports the ending
time step in BatchStepResponse.final_time_steps (docs/protocol.md §3.9). This server resets the
instance but drops the ending time step: the end of the episode, its reward and flags are lost."""

from mutants.base import Counter as Env
from openenv.runtime.vector import VectorSession

CAUGHT_BY = "vector.autoreset_modes"
COLLATERAL: frozenset[str] = frozenset()


class Vector(VectorSession):
    async def step(self, env_ids, actions, timeout):
        ids, results, _finals = await super().step(env_ids, actions, timeout)
        return ids, results, {}


__all__ = ["Env", "Vector"]
