"""The registry of checks: each has a stable id ``level.name``, a title and the rule it enforces.

Checks register themselves with :func:`check`; :func:`all_checks` imports the check modules
and returns every check in a stable order (levels in :data:`LEVELS` order, then definition
order). Ids never change meaning; a retired check keeps its id reserved.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from openenv_conformance.context import Context

__all__ = ["LEVELS", "Check", "CheckFn", "all_checks", "check", "select"]

#: A check: it raises :class:`~openenv_conformance.errors.Violation`, ``CheckFailed`` or
#: ``CheckSkipped``, or returns an optional note.
CheckFn: TypeAlias = "Callable[[Context], str | None]"

#: The levels, in the order they run (``robustness`` last: its final check proves the target
#: survived the whole run).
LEVELS: tuple[str, ...] = (
    "protocol",
    "lifecycle",
    "determinism",
    "schema",
    "tools",
    "rewards",
    "concurrency",
    "vector",
    "sessions",
    "multiagent",
    "parity",
    "sandbox",
    "grading",
    "robustness",
)

_REGISTRY: dict[str, Check] = {}


@dataclasses.dataclass(frozen=True)
class Check:
    """One named check.

    Attributes:
        id: stable id, ``level.name`` (e.g. ``lifecycle.step_count``).
        level: the level it belongs to (the id's prefix).
        title: one line saying what it asserts.
        rule: where the rule comes from (docs/protocol.md section or error-table row).
        fn: the implementation; it raises :class:`~openenv_conformance.errors.Violation`,
            ``CheckFailed`` or ``CheckSkipped``, or returns an optional note.
        requires: transport features the check needs (:mod:`openenv_conformance.transport`:
            ``grpc``, ``frames``, ``episode_fields``); on a transport without one of them
            the check is skipped, with ``why`` (or the feature's generic reason).
        why: why the check needs ``requires``, said in the skip reason.
    """

    id: str
    level: str
    title: str
    rule: str
    fn: CheckFn = dataclasses.field(repr=False, compare=False)
    requires: frozenset[str] = frozenset()
    why: str = ""


def check(
    id: str, title: str, rule: str, *, requires: Iterable[str] = (), why: str = ""
) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the check ``id`` (needing the transport features ``requires``)."""
    level = id.split(".", 1)[0]
    if level not in LEVELS:
        raise ValueError(f"check {id!r}: unknown level {level!r}")

    def register(fn: CheckFn) -> CheckFn:
        if id in _REGISTRY:
            raise ValueError(f"duplicate check id {id!r}")
        _REGISTRY[id] = Check(id, level, title, rule, fn, frozenset(requires), why)
        return fn

    return register


def all_checks() -> list[Check]:
    """Every registered check, levels in order."""
    for level in LEVELS:
        importlib.import_module(f"openenv_conformance.checks.{level}")
    order = {lvl: i for i, lvl in enumerate(LEVELS)}
    return sorted(_REGISTRY.values(), key=lambda c: order[c.level])  # stable: definition order within a level


def select(levels: Iterable[str] | None = None, patterns: Iterable[str] | None = None) -> list[Check]:
    """The checks in ``levels`` (all when empty) whose id matches one of ``patterns``
    (shell-style, e.g. ``lifecycle.*``; all when empty). Unknown levels raise ValueError."""
    levels = [lv for lv in (levels or []) if lv]
    for lv in levels:
        if lv not in LEVELS:
            raise ValueError(f"unknown level {lv!r}; levels are: {', '.join(LEVELS)}")
    pats = [p for p in (patterns or []) if p]
    out = []
    for c in all_checks():
        if levels and c.level not in levels:
            continue
        if pats and not any(fnmatch.fnmatchcase(c.id, p) for p in pats):
            continue
        out.append(c)
    if pats and not out:
        raise ValueError(f"no check matches {', '.join(pats)}")
    return out
