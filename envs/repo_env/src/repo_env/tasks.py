"""The repository tasks: a tiny Python repository with a bug, its visible failing tests, hidden
checks, and a reference fix.

A task is a directory (``repo_env/tasks/<id>/`` for the shipped ones)::

    task.json     {"prompt": ..., "split": "train" | "test", "checks": [...]}
    repo/         the repository the agent starts from (its tests/ are the visible tests)
    fix/          the reference fix: files that replace (or add to) repo/'s

Each hidden check is ``{"name", "kind", "code", "expected"}``: ``code`` is Python that imports
the repository's modules and sets ``result``; ``kind`` is ``fail_to_pass`` (fails on the
buggy repository, passes once fixed) or ``pass_to_pass`` (behaviour that must not regress).
The checks run in a fresh confined call on the agent's files (:data:`GRADER`) and only the
observed ``result`` comes back; ``expected`` stays in the server, which compares. The whole
directory is among the sandbox's secrets: nothing of it but ``repo/`` ever enters the sandbox.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["GRADER", "TASKS", "TASKS_DIR", "Check", "Task", "TaskSet", "load_task", "load_tasks"]

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
KINDS = ("fail_to_pass", "pass_to_pass")


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    kind: str
    code: str
    expected: Any


@dataclasses.dataclass(frozen=True)
class Task:
    """A repository task: ``files`` (path -> text) is the starting repository, ``fix`` the
    reference fix's files (path -> text, replacing or adding to ``files``)."""

    id: str
    prompt: str
    files: Mapping[str, str]
    fix: Mapping[str, str]
    checks: tuple[Check, ...]
    split: str = "train"

    def fixed_files(self) -> dict[str, str]:
        return {**self.files, **self.fix}

    @property
    def visible_tests(self) -> list[str]:
        return sorted(p for p in self.files if p.startswith("tests/"))

    def statement(self) -> str:
        return (
            f"{self.prompt}\n\nThe repository (Python, no third-party packages) holds: "
            f"{', '.join(sorted(self.files))}. Its tests in tests/ (unittest) show the bug; hidden tests check the fix."
        )


class TaskSet(Sequence[Task]):
    """Tasks with unique ids, in a stable order."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks = tuple(tasks)
        self._by_id = {t.id: t for t in self._tasks}
        if len(self._by_id) != len(self._tasks):
            raise ValueError("duplicate task ids")
        if not self._tasks:
            raise ValueError("no tasks")

    def __getitem__(self, i: Any) -> Any:
        return self._tasks[i]

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.split for t in self._tasks))

    def by_id(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"no task {task_id!r}; known: {', '.join(sorted(self._by_id))}") from None

    def sample(self, seed: int | None, split: str | None = None) -> Task:
        pool = [t for t in self._tasks if split is None or t.split == split]
        if not pool:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(self.splits)}")
        return random.Random(seed).choice(pool)


def _read_tree(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def load_task(directory: str | Path) -> Task:
    """The task in ``directory`` (its name is the task's id); ValueError when malformed."""
    d = Path(directory)
    meta = json.loads((d / "task.json").read_text(encoding="utf-8"))
    checks = tuple(Check(c["name"], c["kind"], c["code"], c["expected"]) for c in meta["checks"])
    # pass_to_pass first: they see the modules as the repository left them, before any
    # fail_to_pass check could have changed their state (the checks share one process).
    checks = tuple(sorted(checks, key=lambda c: c.kind != "pass_to_pass"))
    for c in checks:
        if c.kind not in KINDS:
            raise ValueError(f"{d.name}: check {c.name!r} has kind {c.kind!r}, not one of {KINDS}")
    if not any(c.kind == "fail_to_pass" for c in checks):
        raise ValueError(f"{d.name}: no fail_to_pass check")
    files, fix = _read_tree(d / "repo"), _read_tree(d / "fix")
    if not files or not fix:
        raise ValueError(f"{d.name}: a task needs repo/ and fix/")
    return Task(d.name, str(meta["prompt"]), files, fix, checks, str(meta.get("split") or "train"))


def load_tasks(root: str | Path = TASKS_DIR) -> TaskSet:
    """Every task directory below ``root``, sorted by id."""
    return TaskSet(load_task(d) for d in sorted(Path(root).iterdir()) if (d / "task.json").is_file())


#: The grader: loaded as a module in a fresh call on a copy of the agent's files (the
#: workspace is put back on sys.path only after the grader's own imports), then
#: ``check(code)`` per hidden check, in lock step (each answer tagged with a nonce), each
#: stopped after 3 s (so one hanging check fails alone; the call's wall time bounds the rest).
GRADER = r"""
import sys
sys.path[:] = [p for p in sys.path if p and not p.startswith(("/workspace", "."))]
import os, signal
sys.path.insert(0, "/workspace")
sys.dont_write_bytecode = True


def _too_long(signum, frame):
    raise TimeoutError("the check took more than 3 s")


signal.signal(signal.SIGALRM, _too_long)


def check(code):
    ns = {"__name__": "__check__"}
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    try:
        exec(compile(code, "<hidden check>", "exec"), ns)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return ns.get("result")
"""

#: The shipped tasks.
TASKS = load_tasks()
