"""Rule broken: rewards are finite (docs/protocol.md §7). A delta of 3 is rewarded NaN."""

from mutants.base import Counter

CAUGHT_BY = "rewards.finite"
COLLATERAL = frozenset({"parity.grpc_vs_http"})


class Env(Counter):
    def reward_of(self, delta):
        return float("nan") if delta == 3 else float(delta)
