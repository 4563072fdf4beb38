"""The coding environment: Python problems graded by hidden tests, code run in a sandbox."""

from coding_env.problems import PROBLEMS, Problem
from coding_env.server import CodingEnvironment
from coding_env.tasks import Case, Task, TaskError, TaskSet, load_tasks, tasks_from_records
from openenv import CallToolAction, CallToolObservation
from openenv.sandbox import Limits, RunResult, Sandbox, SandboxUnavailable

__all__ = [
    "PROBLEMS",
    "CallToolAction",
    "CallToolObservation",
    "Case",
    "CodingEnvironment",
    "Limits",
    "Problem",
    "RunResult",
    "Sandbox",
    "SandboxUnavailable",
    "Task",
    "TaskError",
    "TaskSet",
    "load_tasks",
    "tasks_from_records",
]
