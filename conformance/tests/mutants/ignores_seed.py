"""Rule broken: with Capabilities.seeded, reset's seed selects the episode (docs/protocol.md
§1.3). The counter declares seeded determinism but always starts from the same value, whatever
the seed (OpenEnv's most repeated bug class: a generator seeded once, or never)."""

from mutants.base import Counter

CAUGHT_BY = "determinism.seeds_honoured"
COLLATERAL: frozenset[str] = frozenset()


class Env(Counter):
    def reset(self, *, seed=None, episode_id=None, options=None):
        return super().reset(seed=0, episode_id=episode_id, options=options)
