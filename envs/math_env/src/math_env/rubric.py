"""The math environment's reward, as a rubric tree::

    reward (gate, threshold 1)
    ├── answer_format            1 when the step submits a plain number, else 0
    └── score (weighted_sum)
        ├── correctness    x 1.0 1 when the submitted number equals the answer
        └── length_penalty x -0.2 share of the step budget used beyond FREE_STEPS

Steps that do not submit an answer (calculator, scratchpad) score 0: the gate is
closed. A correct answer in at most ``FREE_STEPS`` steps scores 1.0; the reward lies in
[-0.2, 1.0].
"""

from __future__ import annotations

import re
from typing import Any

from openenv.rubrics import Gate, Score, WeightedSum, leaf

__all__ = ["FREE_STEPS", "MAX_STEPS", "NUMBER", "build_rubric", "parse_number"]

MAX_STEPS = 10
FREE_STEPS = 3
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def parse_number(text: Any) -> float | None:
    """The number a submitted answer states, or None when it is not a plain number."""
    s = str(text).strip()
    return float(s) if NUMBER.fullmatch(s) else None


def _submitted(action: Any) -> Any:
    if getattr(action, "tool_name", None) != "submit_answer":
        return None
    return action.arguments.get("answer")


@leaf(minimum=0, maximum=1)
def answer_format(action: Any, observation: Any) -> float:
    """The step submits an answer that is a plain number (e.g. 42, -3, 2.5)."""
    answer = _submitted(action)
    return 1.0 if answer is not None and parse_number(answer) is not None else 0.0


@leaf(minimum=0, maximum=1)
def correctness(action: Any, observation: Any, env: Any) -> Score:
    """The submitted number equals the task's answer."""
    got = parse_number(_submitted(action))
    ok = got is not None and abs(got - env.task.answer) < 1e-9
    return Score(1.0 if ok else 0.0, reason="correct" if ok else "incorrect")


@leaf(minimum=0, maximum=1)
def length_penalty(action: Any, observation: Any, env: Any) -> float:
    """Share of the step budget used beyond the free steps."""
    extra = max(0, env.steps - FREE_STEPS)
    return min(1.0, extra / (MAX_STEPS - FREE_STEPS))


def build_rubric() -> Gate:
    """A fresh copy of the environment's rubric tree."""
    return Gate(
        answer_format,
        WeightedSum([correctness, length_penalty], [1.0, -0.2], name="score"),
        name="reward",
        description="Format gate, then correctness minus a length penalty.",
    )
