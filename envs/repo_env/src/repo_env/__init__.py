"""The repository environment: fix a bug in a small Python repository, graded by hidden tests."""

from repo_env.diff import git_diff
from repo_env.server import RepoEnvironment
from repo_env.tasks import GRADER, TASKS, Check, Task, TaskSet, load_task, load_tasks

__all__ = ["GRADER", "TASKS", "Check", "RepoEnvironment", "Task", "TaskSet", "git_diff", "load_task", "load_tasks"]
