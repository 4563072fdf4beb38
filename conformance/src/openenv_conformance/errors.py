"""The suite's own exceptions: how a check fails, skips, or finds the target unusable."""

from __future__ import annotations

__all__ = ["CheckFailed", "CheckNotExercised", "CheckSkipped", "CheckWarning", "TargetUnusable", "Violation"]


class TargetUnusable(Exception):
    """The target cannot be certified at all: it did not start, or does not answer GetInfo.

    ``logs`` holds whatever the target printed (process or container output), if anything.
    """

    def __init__(self, message: str, logs: str = "") -> None:
        super().__init__(message)
        self.logs = logs


class Violation(AssertionError):
    """A rule of the contract was broken. Raised inside checks (and inside Hypothesis
    searches, which shrink to the minimal example that raises it).

    ``cause`` names the observed defect when it is one that other checks see too (a key of
    :data:`openenv_conformance.report.CAUSES`, e.g. ``step_count``): the report groups the
    failures of one cause under it, so a user reads the defect first and its echoes after."""

    def __init__(self, message: str = "", *, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class CheckFailed(Exception):
    """A check failed; ``example`` is the minimal failing example, when one exists."""

    def __init__(self, reason: str, example: str | None = None, *, cause: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.example = example
        self.cause = cause


class CheckSkipped(Exception):
    """The check does not apply to this environment; the message says why."""


class CheckNotExercised(Exception):
    """The check applies, but nothing its rule is about happened in this run (no step outlived
    its timeout, no episode ended...): a ``not_exercised`` result, never a pass. The message
    says what was tried and what did not happen."""


class CheckWarning(Exception):
    """The check found something suspicious that the contract does not forbid (a ``warn``
    result: reported, and the run still certifies); the message says what."""
