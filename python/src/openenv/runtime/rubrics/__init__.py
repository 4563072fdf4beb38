"""Rubrics: rewards composed of checks, with the breakdown carried on the wire.

A rubric is a tree. Leaves score one step's ``(action, observation)``; containers
combine their children's scores. An environment declares its rubric as a class
attribute::

    class MathEnv(openenv.Environment):
        rubric = Gate(IsNumber(), WeightedSum([Correct(), Brevity()], [1.0, -0.2]))

and the runtime then, for every step whose result has no reward of its own, evaluates
the tree and sends ``reward`` = the root score plus ``reward_breakdown`` = the score
tree (``openenv.v1.RubricScore``). ``EnvironmentInfo.rubric`` carries the spec tree
(``openenv.v1.RubricSpec``). docs/rubrics.md states exactly how each kind's score
follows from its children's.

What you may rely on:

* Each session gets its own copy of the class's rubric (:meth:`Rubric.clone`), bound to
  the session's environment instance (``rubric.env``) and set as ``env.rubric``; it is
  reset (:meth:`Rubric.reset`) on every episode reset and closed when the session ends.
* A tree whose nodes are all sync is evaluated in one call, in a worker thread when the
  environment's ``run_in_thread`` is true (the default). A tree with an async node is
  evaluated on the event loop; its sync leaves are then called inline and should be
  cheap. :class:`WeightedSum` evaluates async children concurrently.
* A node's score is checked: it must be a finite number inside the node's declared
  ``minimum``/``maximum`` (else ``ValueError``, an INTERNAL error for the step).
"""

from openenv.runtime.rubrics.base import CREDITS_METADATA_KEY, FunctionRubric, Rubric, Score, leaf
from openenv.runtime.rubrics.combinators import Gate, Sequential, WeightedSum
from openenv.runtime.rubrics.judge import DEFAULT_JUDGE_SYSTEM_PROMPT, DEFAULT_SCORE_PATTERN, JudgeError, LLMJudge
from openenv.runtime.rubrics.trajectory import ExponentialDiscountingTrajectoryRubric, TrajectoryRubric

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
