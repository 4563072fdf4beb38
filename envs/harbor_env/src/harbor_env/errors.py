"""The error every part of harbor_env raises for a task it cannot serve."""

from __future__ import annotations

__all__ = ["TaskError"]


class TaskError(ValueError):
    """A task cannot be served here: the message names the task, the file and what is missing."""
