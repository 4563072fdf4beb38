"""The coding environment's reward, as a rubric tree.

By default all or nothing (RFC 0015: no partial credit for a constant or an empty answer)::

    reward (gate, threshold 1)          in {0} and [0.9, 1]
    ├── solved                          1 when the submission loads and every hidden test passes, else 0
    └── score (weighted_sum)
        ├── solved         x  1.0       (1 here: the gate is open)
        └── length_penalty x -0.1       characters beyond 4,000, per 16,000, clamped to [0, 1]

A correct solution of ordinary length scores 1.0; anything else scores exactly 0: an empty
submission, one that does not load, a constant, one right on some hidden tests only, one that
runs out of time. There is no time penalty: the hidden run's time is a function of the hidden
arguments (a function that sleeps in proportion to its input would send one out through the
reward). The length penalty stays: it is a function of the submitted code alone (which the agent
wrote: it carries nothing of the hidden tests), it only lowers a correct solution's reward (never
pays a wrong one), and it makes a hard-coded table of answers cost something.

With ``partial_credit=True`` (:attr:`coding_env.server.CodingEnvironment.partial_credit`, an
opt-in for curricula) the tree is the former shaping::

    reward (gate, threshold 1)
    ├── loads                       1 when a submission loads and defines the function, else 0
    └── score (weighted_sum)
        ├── tests_passed   x  1.0   fraction of the hidden tests passed
        ├── length_penalty x -0.1   characters beyond 4,000, per 16,000, clamped to [0, 1]
        └── time_penalty   x -0.1   seconds of the hidden tests' run beyond 4 s, per 4 s, clamped

It can be farmed: a constant answer earns the fraction of hidden tests whose expected value it
is (up to 0.67 on the shipped problems), and the reward carries the hidden run's time. Never
train a policy on it for the skill itself.

Steps that do not submit score 0 in both (the gate is closed).
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


def _loaded(sub: Any) -> bool:
    return sub is not None and sub.load_error is None and not sub.timed_out_loading and sub.code.strip() != ""


@leaf(minimum=0, maximum=1)
def solved(action: Any, observation: Any, env: Any) -> Score:
    """The submitted code loads and passes every hidden test."""
    sub = _submission(env, action)
    ok = _loaded(sub) and sub.total > 0 and sub.passed == sub.total
    return Score(1.0 if ok else 0.0, reason="solved" if ok else "not solved")


@leaf(minimum=0, maximum=1)
def loads(action: Any, observation: Any, env: Any) -> Score:
    """The submitted code loads and defines the function."""
    sub = _submission(env, action)
    ok = _loaded(sub)
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


def build_rubric(*, partial_credit: bool = False) -> Gate:
    """A fresh copy of the environment's rubric tree: all or nothing (the default), or the
    farmable partial credit of the module docstring."""
    if partial_credit:
        return Gate(
            loads,
            WeightedSum([tests_passed, length_penalty, time_penalty], [1.0, -0.1, -0.1], name="score"),
            name="reward",
            description=(
                "Partial credit (an opt-in for curricula, farmable): correctness gate, then the fraction of hidden "
                "tests passed minus length and time penalties."
            ),
        )
    return Gate(
        solved,
        WeightedSum([solved, length_penalty], [1.0, -0.1], name="score"),
        name="reward",
        description="All or nothing: 1 when every hidden test passes (less a penalty for code beyond 4,000 "
        "characters), else 0.",
        # The open gate's score is 1 - 0.1 x length_penalty, in [0.9, 1]; the closed one 0.
        minimum=0.0,
        maximum=1.0,
    )
