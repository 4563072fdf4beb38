"""Rule broken: a reward breakdown's root score equals the reward (docs/protocol.md §7).
Breakdowns are off by 0.5."""

from mutants.base import Counter
from openenv import StepResult
from openenv.v1 import rubric_pb2

CAUGHT_BY = "rewards.breakdown"
COLLATERAL: frozenset[str] = frozenset()


class Env(Counter):
    def step(self, action):
        r = super().step(action)
        r.reward_breakdown = rubric_pb2.RubricScore(name="total", score=r.reward + 0.5)
        return StepResult(r.observation, r.reward, r.terminated, r.truncated, r.metadata, r.reward_breakdown)
