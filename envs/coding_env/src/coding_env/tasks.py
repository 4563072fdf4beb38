"""Tasks of the coding environment: a function to write, examples to show, hidden cases to grade.

A :class:`Task` names the function (``entry_point``), says what it must do (``prompt``), shows
``public`` cases (in the statement and through ``run_tests``) and grades with ``hidden`` ones.
A :class:`Case` holds the arguments and, optionally, the expected value; a case without one is
answered by the task's ``reference`` solution, run once in the server (trusted code, never in
the sandbox). Expected values and hidden arguments never enter the sandbox except as the
arguments of the call being graded, one at a time.

Your own tasks, from Python or a file::

    from coding_env import CodingEnvironment, Case, Task, load_tasks

    tasks = load_tasks("my_tasks.jsonl")            # .jsonl, .json (a list) or .parquet
    MyCoding = CodingEnvironment.with_tasks(tasks, name="my_coding")   # serve, certify, train

    task = Task("double", "Double a number.", "double",
                public=[Case((2,), 4)], hidden=[Case((5,), 10), Case((-1,), -2)])

One JSON object per task (JSON Lines), e.g.::

    {"id": "double", "prompt": "Double a number.", "entry_point": "double", "split": "train",
     "public": [{"args": [2], "expected": 4}],
     "hidden": [{"args": [5], "expected": 10}, {"args": [-1]}],
     "reference": "def double(x):\\n    return 2 * x\\n"}

``split`` defaults to ``"train"``; ``reference`` is needed only when a case has no ``expected``.
Values are JSON values: a function's result is compared as JSON (tuples as lists, sets as
sorted lists), floats within 1e-6. In Parquet, ``public`` and ``hidden`` are lists of structs,
or JSON text. Files are checked when loaded: every problem is named with its line.

Serving a file without writing Python: ``CODING_ENV_TASKS=/path/tasks.jsonl openenv serve
coding_env.server:CodingEnvironment`` (also in the image, with the file mounted). The file's path
is among the sandbox's secrets: the server refuses to start if submitted code could see it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.runtime.tasks import TaskSet as BaseTaskSet
from openenv.sandbox import CaseResult

__all__ = ["Case", "Task", "TaskError", "TaskSet", "load_tasks", "same", "tasks_from_records"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class TaskError(ValueError):
    """A task or task file is malformed; the message says where."""


def plain(value: Any) -> Any:
    """The JSON shape of a value, as the sandbox reports a returned one."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def same(got: Any, want: Any) -> bool:
    """Equality of JSON-shaped values, floats within 1e-6 (relative or absolute)."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    return type(got) is type(want) and bool(got == want)


@dataclasses.dataclass(frozen=True)
class Case:
    """One call of the function: its arguments, and the expected value (MISSING: the task's
    reference solution answers it)."""

    args: tuple[Any, ...]
    expected: Any = MISSING


@dataclasses.dataclass(frozen=True)
class Task:
    """A function to write, graded by its hidden cases (see the module docstring)."""

    id: str
    prompt: str
    entry_point: str
    public: tuple[Case, ...] = ()
    hidden: tuple[Case, ...] = ()
    split: str = "train"
    reference: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "public", tuple(_case(c) for c in self.public))
        object.__setattr__(self, "hidden", tuple(_case(c) for c in self.hidden))
        if not self.id:
            raise TaskError("a task needs an id")
        if not self.entry_point.isidentifier():
            raise TaskError(f"task {self.id!r}: entry_point {self.entry_point!r} is not a Python identifier")
        if not self.hidden:
            raise TaskError(f"task {self.id!r}: no hidden cases to grade with")
        if self.reference is None and any(c.expected is MISSING for c in (*self.public, *self.hidden)):
            raise TaskError(f"task {self.id!r}: a case has no expected value and the task has no reference")

    @functools.cached_property
    def _fn(self) -> Any:
        ns: dict[str, Any] = {}
        exec(compile(self.reference or "", f"<reference {self.id}>", "exec"), ns)  # trusted, the task's own
        fn = ns.get(self.entry_point)
        if not callable(fn):
            raise TaskError(f"task {self.id!r}: its reference defines no function {self.entry_point!r}")
        return fn

    def expected(self, case: Case | Sequence[Any]) -> Any:
        """The expected value of ``case`` (JSON-shaped), from the case or the reference."""
        c = _case(case)
        if c.expected is not MISSING:
            return plain(c.expected)
        return plain(self._fn(*copy.deepcopy(list(c.args))))

    def statement(self) -> str:
        """The prompt with the public cases as examples."""
        examples = "\n".join(
            f"    {self.entry_point}({', '.join(map(repr, c.args))}) == {self.expected(c)!r}" for c in self.public
        )
        text = f"{self.prompt}\n\nWrite a Python function `{self.entry_point}`."
        return f"{text} Examples:\n{examples}" if examples else text

    def grade(self, cases: Sequence[Case], results: Sequence[CaseResult]) -> list[bool]:
        """Which of ``cases`` the sandbox's ``results`` pass (a missing or failed answer fails)."""
        out = []
        for i, c in enumerate(cases):
            r = results[i] if i < len(results) else None
            try:
                ok = r is not None and r.answered and r.error is None and same(r.value, self.expected(c))
            except RecursionError:  # an answer nested deeper than any expected value
                ok = False
            out.append(ok)
        return out

    def check(self) -> None:
        """Compute every expected value now (a reference that fails is reported here)."""
        for c in (*self.public, *self.hidden):
            try:
                json.dumps(list(c.args))
                json.dumps(self.expected(c))
            except TaskError:
                raise
            except Exception as e:  # noqa: BLE001 - reported with the task's name
                raise TaskError(f"task {self.id!r}: case {list(c.args)!r}: {type(e).__name__}: {e}") from None


def _case(c: Case | Sequence[Any] | Mapping[str, Any]) -> Case:
    if isinstance(c, Case):
        return Case(tuple(c.args), c.expected)
    if isinstance(c, Mapping):
        if "args" not in c:
            raise TaskError(f"a case needs 'args': {dict(c)!r}")
        args = c["args"]
        if not isinstance(args, (list, tuple)):
            raise TaskError(f"a case's 'args' must be a list: {args!r}")
        return Case(tuple(args), c.get("expected", MISSING))
    return Case(tuple(c))


class TaskSet(BaseTaskSet[Task]):
    """coding_env's tasks with unique ids, in a stable order (:class:`openenv.TaskSet`);
    ``sources`` are the files they came from. Refusals are :class:`TaskError`."""

    error = TaskError

    def check(self) -> None:
        """Check every task (its reference solution passes its cases)."""
        for t in self._tasks:
            t.check()


def tasks_from_records(records: Iterable[Mapping[str, Any]], *, source: str = "records") -> TaskSet:
    """Tasks from JSON-like records (the file format of the module docstring)."""
    tasks = []
    for n, rec in enumerate(records, 1):
        where = f"{source}: task {n}"
        if not isinstance(rec, Mapping):
            raise TaskError(f"{where}: a task is an object, not {type(rec).__name__}")
        unknown = set(rec) - {"id", "prompt", "entry_point", "split", "public", "hidden", "reference"}
        if unknown:
            raise TaskError(f"{where}: unknown fields {sorted(unknown)}")
        try:
            public, hidden = (_cases(rec.get(k)) for k in ("public", "hidden"))
            task = Task(
                id=str(rec["id"]),
                prompt=str(rec.get("prompt", "")),
                entry_point=str(rec["entry_point"]),
                public=public,
                hidden=hidden,
                split=str(rec.get("split") or "train"),
                reference=rec.get("reference"),
            )
            task.check()
        except KeyError as e:
            raise TaskError(f"{where}: missing field {e}") from None
        except TaskError as e:
            raise TaskError(f"{where}: {e}") from None
        tasks.append(task)
    try:
        return TaskSet(tasks, [source] if os.path.exists(source) else [])
    except TaskError as e:
        raise TaskError(f"{source}: {e}") from None


def _cases(value: Any) -> tuple[Case, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # JSON text (e.g. a Parquet column)
        try:
            value = json.loads(value)
        except ValueError as e:
            raise TaskError(f"cases are not valid JSON: {e}") from None
    if not isinstance(value, (list, tuple)):
        raise TaskError(f"cases must be a list, not {type(value).__name__}")
    return tuple(_case(c) for c in value)


def load_tasks(path: str | os.PathLike[str]) -> TaskSet:
    """Tasks from a ``.jsonl`` (one task per line), ``.json`` (a list) or ``.parquet`` file
    (needs ``pyarrow``). Raises :class:`TaskError` naming the file, the task and the problem."""
    p = Path(path)
    if not p.is_file():
        raise TaskError(f"no task file {str(p)!r}")
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise TaskError(f"{p}: reading Parquet needs pyarrow (pip install pyarrow)") from None
        records: list[Any] = pq.read_table(p).to_pylist()
    elif suffix == ".json":
        try:
            records = json.loads(p.read_text())
        except ValueError as e:
            raise TaskError(f"{p}: not valid JSON: {e}") from None
        if not isinstance(records, list):
            raise TaskError(f"{p}: a .json task file holds a list of tasks")
    elif suffix in (".jsonl", ".ndjson"):
        records = []
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    raise TaskError(f"{p}:{n}: not valid JSON: {e}") from None
    else:
        raise TaskError(f"{p}: unknown task file type {suffix!r} (.jsonl, .json or .parquet)")
    return tasks_from_records(records, source=str(p))
