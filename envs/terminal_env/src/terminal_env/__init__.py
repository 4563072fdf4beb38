"""The terminal environment: shell tasks in a sandbox, verified by checks after the agent."""

from terminal_env.families import TASKS
from terminal_env.server import TerminalEnvironment
from terminal_env.tasks import TIERS, VERIFIER, Check, Task, TaskFamily, TaskSet

__all__ = ["TASKS", "TIERS", "VERIFIER", "Check", "Task", "TaskFamily", "TaskSet", "TerminalEnvironment"]
