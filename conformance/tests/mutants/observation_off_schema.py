"""Rule broken: observations conform to the declared schema (docs/protocol.md §2).
After a step that leaves the counter negative, the integer "value" is sent as a string."""

from mutants.base import Counter

CAUGHT_BY = "schema.observations"
COLLATERAL: frozenset[str] = frozenset()


class Env(Counter):
    def observe(self):
        return {"value": str(self.value) if self.value < 0 else self.value}
