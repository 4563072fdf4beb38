"""Rule broken: state is read-only (docs/protocol.md §3.6). Every state() call nudges the
simulation: the next step's reward is 0.5 lower per state call since that step (the
observation and flags stay as they were, so only a comparison with the same seed without
state requests shows it)."""

from mutants.base import Counter

CAUGHT_BY = "lifecycle.state_read_only"
COLLATERAL = frozenset({"concurrency.isolation", "parity.grpc_vs_http", "vector.batch_matches_sequential"})


class Env(Counter):
    reads = 0

    def state(self):
        self.reads += 1
        return super().state()

    def reward_of(self, delta):
        penalty, self.reads = 0.5 * min(self.reads, 2), 0
        return float(delta) - penalty if delta > 0 else float(delta)
