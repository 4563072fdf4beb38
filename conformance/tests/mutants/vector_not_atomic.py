"""Rule broken: a batch step is validated as a whole before any instance steps
(docs/protocol.md §3.9). This server steps the listed instances one by one and notices an
env id out of range, a repeated id or a wrong number of actions only when it gets there, so
the instances before it have already stepped."""

from mutants.base import Counter as Env
from openenv.errors import InvalidArgument
from openenv.runtime.vector import VectorSession

CAUGHT_BY = "vector.validation_is_atomic"
COLLATERAL: frozenset[str] = frozenset()


class Vector(VectorSession):
    async def step(self, env_ids, actions, timeout):
        ids = list(env_ids) if env_ids else list(range(self.num_envs))
        out, finals, seen = [], {}, set()
        for i, action in zip(ids, actions, strict=False):
            if i >= self.num_envs or i in seen:
                raise InvalidArgument(f"env id {i} is out of range or repeated")
            seen.add(i)
            _, results, final = await super().step([i], [action], timeout)
            out += results
            finals.update(final)
        if len(actions) != len(ids):
            raise InvalidArgument(f"{len(actions)} actions for {len(ids)} instances")
        return ids, out, finals


__all__ = ["Env", "Vector"]
