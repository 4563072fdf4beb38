"""Rule broken: rewards lie within the declared range (docs/protocol.md §7).
The environment declares [-1, 1] but rewards deltas up to 3."""

from mutants.base import Counter

CAUGHT_BY = "rewards.range"
COLLATERAL: frozenset[str] = frozenset()


class Env(Counter):
    reward_range = (-1.0, 1.0)
