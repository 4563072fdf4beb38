"""Rule broken: restoring a snapshot continues the episode exactly (RFC 0006 §3): its random
generator included. Observations carry seeded noise; restore forgets the generator's state."""

import random

from mutants.base import Counter

CAUGHT_BY = "sessions.restore_reproduces"
COLLATERAL = frozenset({"sessions.forks_independent"})


class Env(Counter):
    def observe(self):
        return {"value": self.value, "noise": self.rng.random()}

    def restore(self, data):
        super().restore(data)
        self.rng = random.Random()  # a fresh generator, not the snapshot's
