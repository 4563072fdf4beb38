"""The repository tasks: a tiny Python repository with a bug, its visible failing tests, hidden
checks, and a reference fix.

A task is a directory (``repo_env/tasks/<id>/`` for the shipped ones)::

    task.json     {"prompt": ..., "split": "train" | "test", "checks": [...]}
    repo/         the repository the agent starts from (its tests/ are the visible tests)
    fix/          the reference fix: files that replace (or add to) repo/'s

Each hidden check is ``{"name", "kind", "code", "expected"}``: ``code`` is Python that imports
the repository's modules and sets ``result`` to the **raw values it observed** (what a function
returned, an exception's type name), never a verdict (no ``==``, ``all()``, ``isinstance`` in
the check: a verdict computed next to the agent's code is the agent's to forge); ``expected`` is
what they must equal, compared by the server (:func:`same_value`). ``kind`` is ``fail_to_pass``
(fails on the buggy repository, passes once fixed) or ``pass_to_pass`` (behaviour that must not
regress). Each check runs alone in a fresh confined process on a clean copy of the agent's
files (:data:`GRADER`) and only the observed ``result`` comes back. The whole directory is among
the sandbox's secrets: nothing of it but ``repo/`` and the code of the check being run ever
enters the sandbox.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openenv.runtime.tasks import TaskSet as BaseTaskSet

__all__ = ["GRADER", "TASKS", "TASKS_DIR", "Check", "Task", "TaskSet", "load_task", "load_tasks", "same_value"]

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


class TaskSet(BaseTaskSet[Task]):
    """repo_env's tasks with unique ids, in a stable order (:class:`openenv.TaskSet`)."""


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


def same_value(got: Any, expected: Any) -> bool:
    """Whether an observed JSON value equals the expected one, by type as well as value: a bool
    is not a number (``True`` does not answer ``1``), an int equals a float of the same value,
    lists and dicts compare element by element, anything else (an unserialisable result comes
    back as ``{"__repr__": ...}``) only by equality of plain JSON values."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and got == expected
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(same_value(g, e) for g, e in zip(got, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and got.keys() == expected.keys()
            and all(same_value(got[k], v) for k, v in expected.items())
        )
    if expected is None or isinstance(expected, str):
        return type(got) is type(expected) and got == expected
    raise TypeError(f"an expected value must be JSON, not {type(expected).__name__}")


#: The grader of one hidden check: loaded in a fresh confined process (one sandbox call per
#: check) on a clean copy of the agent's files, then ``check(code)`` once, in lock step (the
#: answer counts only with its question's nonce). Its own imports, ``exec``, ``compile`` and the
#: builtins the check's code sees are bound before the workspace is on ``sys.path``, so what
#: the agent's package rebinds at import (``builtins.compile``, ``builtins.all``, ...) changes
#: nothing the check's code or the grader calls. The agent's code still runs in this process
#: and could write any answer line of its own (it can read the question's nonce from the
#: frames): the answer is a raw value the server compares, so a forged one earns only what the
#: right value would, and nothing of it reaches the next check, which runs in a new process.
GRADER = r"""
import sys
sys.path[:] = [p for p in sys.path if p and not p.startswith(("/workspace", "."))]
import builtins
_BUILTINS = dict(vars(builtins))
_exec, _compile, _dict = builtins.exec, builtins.compile, builtins.dict
sys.path.insert(0, "/workspace")
sys.dont_write_bytecode = True


def check(code):
    ns = {"__name__": "__check__", "__builtins__": _dict(_BUILTINS)}
    _exec(_compile(code, "<hidden check>", "exec", dont_inherit=True), ns)
    return ns.get("result")
"""

#: The shipped tasks.
TASKS = load_tasks()
