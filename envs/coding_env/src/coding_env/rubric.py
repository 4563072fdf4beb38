"""The coding environment's reward, as a rubric tree::

    reward (gate, threshold 1)
    ├── loads                       1 when a submission loads and defines the function, else 0
    └── score (weighted_sum)
        ├── tests_passed   x  1.0   fraction of the hidden tests passed
        ├── length_penalty x -0.1   characters beyond 4,000, per 16,000, clamped to [0, 1]
        └── time_penalty   x -0.1   seconds of the hidden tests' run beyond 4 s, per 4 s, clamped

Steps that do not submit score 0 (the gate is closed). A correct solution of ordinary length
and speed scores 1.0; an empty one or one that does not load scores 0; a loading but wrong
one scores at most 0 (its tests passed are 0; penalties only bite beyond the free budgets).
"""

from __future__ import annotations

from typing import Any

from openenv.rubrics import Gate, Score, WeightedSum, leaf

__all__ = ["FREE_CHARS", "FREE_SECONDS", "build_rubric"]

FREE_CHARS = 4000
FREE_SECONDS = 4.0


def _submission(env: Any, action: Any) -> Any:
    if getattr(action, "tool_name", None) != "submit":
        return None
    return env.submission


@leaf(minimum=0, maximum=1)
def loads(action: Any, observation: Any, env: Any) -> Score:
    """The submitted code loads and defines the function."""
    sub = _submission(env, action)
    ok = sub is not None and sub.load_error is None and not sub.timed_out_loading and sub.code.strip() != ""
    return Score(
        1.0 if ok else 0.0, reason="loads" if ok else (sub.load_error if sub else "not a submission") or "empty"
    )


@leaf(minimum=0, maximum=1)
def tests_passed(action: Any, observation: Any, env: Any) -> Score:
    """Fraction of the hidden tests passed."""
    sub = _submission(env, action)
    if sub is None or not sub.total:
        return Score(0.0)
    return Score(sub.passed / sub.total, reason=f"{sub.passed}/{sub.total} hidden tests")


@leaf(minimum=0, maximum=1)
def length_penalty(action: Any, observation: Any, env: Any) -> float:
    """Characters beyond FREE_CHARS, per 16,000."""
    sub = _submission(env, action)
    return 0.0 if sub is None else min(1.0, max(0, len(sub.code) - FREE_CHARS) / 16000)


@leaf(minimum=0, maximum=1)
def time_penalty(action: Any, observation: Any, env: Any) -> float:
    """Seconds of the hidden tests' run beyond FREE_SECONDS, per 4 s."""
    sub = _submission(env, action)
    return 0.0 if sub is None else min(1.0, max(0.0, sub.time_s - FREE_SECONDS) / 4.0)


def build_rubric() -> Gate:
    """A fresh copy of the environment's rubric tree."""
    return Gate(
        loads,
        WeightedSum([tests_passed, length_penalty, time_penalty], [1.0, -0.1, -0.1], name="score"),
        name="reward",
        description="Correctness gate, then the fraction of hidden tests passed minus length and time penalties.",
    )
