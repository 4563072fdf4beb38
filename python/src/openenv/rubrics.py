"""Reward rubrics (the public path of :mod:`openenv.runtime.rubrics`; see docs/rubrics.md)."""

from openenv.runtime.rubrics import (
    CREDITS_METADATA_KEY,
    DEFAULT_JUDGE_SYSTEM_PROMPT,
    DEFAULT_SCORE_PATTERN,
    ExponentialDiscountingTrajectoryRubric,
    FunctionRubric,
    Gate,
    JudgeError,
    LLMJudge,
    Rubric,
    Score,
    Sequential,
    TrajectoryRubric,
    WeightedSum,
    leaf,
)

__all__ = [
    "CREDITS_METADATA_KEY",
    "DEFAULT_JUDGE_SYSTEM_PROMPT",
    "DEFAULT_SCORE_PATTERN",
    "ExponentialDiscountingTrajectoryRubric",
    "FunctionRubric",
    "Gate",
    "JudgeError",
    "LLMJudge",
    "Rubric",
    "Score",
    "Sequential",
    "TrajectoryRubric",
    "WeightedSum",
    "leaf",
]
