"""Rule broken (reward sanity, in the spirit of OpenEnv RFC 008; a warning unless
``--strict-rewards``): with a declared reward_range, the maximum reward is not reachable by a
trivial policy. Any positive step earns the maximum reward (3), so repeating the first
example action ({"delta": 1}) is rewarded as well as the best play. Certified with
``strict_rewards`` (``RUN_OPTIONS``) so the finding fails."""

from mutants.base import Counter

CAUGHT_BY = "rewards.trivial_max"
COLLATERAL: frozenset[str] = frozenset()
RUN_OPTIONS = {"strict_rewards": True}


class Env(Counter):
    def reward_of(self, delta):
        return 3.0 if delta > 0 else float(delta)
