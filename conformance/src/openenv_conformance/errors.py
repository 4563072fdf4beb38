"""The suite's own exceptions: how a check fails, skips, or finds the target unusable."""

from __future__ import annotations

__all__ = ["CheckFailed", "CheckSkipped", "CheckWarning", "TargetUnusable", "Violation"]


class TargetUnusable(Exception):
    """The target cannot be certified at all: it did not start, or does not answer GetInfo.

    ``logs`` holds whatever the target printed (process or container output), if anything.
    """

    def __init__(self, message: str, logs: str = "") -> None:
        super().__init__(message)
        self.logs = logs


class Violation(AssertionError):
    """A rule of the contract was broken. Raised inside checks (and inside Hypothesis
    searches, which shrink to the minimal example that raises it)."""


class CheckFailed(Exception):
    """A check failed; ``example`` is the minimal failing example, when one exists."""

    def __init__(self, reason: str, example: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.example = example


class CheckSkipped(Exception):
    """The check does not apply to this environment; the message says why."""


class CheckWarning(Exception):
    """The check found something suspicious that the contract does not forbid (a ``warn``
    result: reported, and the run still certifies); the message says what."""
