"""The math reference environment: server (:class:`MathEnvironment`) and client (:class:`MathEnv`)."""

from math_env.calculator import CalculatorError, evaluate
from math_env.client import MathEnv
from math_env.server import MathEnvironment
from math_env.tasks import TASKS, Task, sample
from openenv import CallToolAction, CallToolObservation

__all__ = [
    "TASKS",
    "CalculatorError",
    "CallToolAction",
    "CallToolObservation",
    "MathEnv",
    "MathEnvironment",
    "Task",
    "evaluate",
    "sample",
]
