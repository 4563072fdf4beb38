"""A control, not a mutant: a correct environment that declares ``concurrent_sessions =
False`` (capacity 1, a documented declaration). It must certify: every check that needs a
second session runs its sessions one after the other, or skips saying why."""

from mutants.base import Counter

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()


class Env(Counter):
    concurrent_sessions = False
    max_sessions = 1
