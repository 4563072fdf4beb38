"""Check Harbor tasks: the reference solution passes its tests, a null solution does not.

``harbor-env check DIR`` (or :func:`check_tasks`) plays, for every task: a fresh starting state
graded as it is (the null solution: nothing done; its reward must be below 1), then a fresh
starting state, ``solution/solve.sh`` (Harbor's oracle), graded (its reward must be 1). DIR is a
task, a directory of tasks, a directory of splits, or a Harbor registry-style dataset
(``registry.json``). ``--mode container`` builds and runs each task in its own container as
Harbor does (docs/harbor.md); the default is ``$HARBOR_MODE``, else the sandbox.

Prints, per task, a line with both rewards and the tail of the verifier's output for each run
(``-v``: all of it that was kept; ``-q``: none), then a table of the tasks that cannot run here
and why (refused when loaded: a field or resource they need), and exits 1 when any task failed
or was refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from harbor_env.task import HarborTask, TaskError, load_tasks

__all__ = ["TaskCheck", "check_tasks", "main"]


@dataclasses.dataclass
class TaskCheck:
    task_id: str
    null_reward: float
    reference_reward: float
    null_error: str | None
    reference_error: str | None
    seconds: float
    null_log: str = ""
    reference_log: str = ""

    @property
    def ok(self) -> bool:
        return self.reference_reward >= 1.0 and self.null_reward < 1.0

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        why = ""
        if not self.ok:
            ref = self.reference_error or ("-" if self.reference_reward >= 1.0 else "the tests' reward")
            null = self.null_error or ("the tests' reward" if self.null_reward >= 1.0 else "-")
            why = f"  reference: {ref}; null: {null}"
        scores = f"reference {self.reference_reward:g}, null {self.null_reward:g}"
        return f"{mark} {self.task_id}: {scores} ({self.seconds:.1f} s){why}"


def _tail(text: str, lines: int) -> str:
    kept = [x for x in text.rstrip().splitlines() if x.strip()]
    return "\n".join(kept[-lines:]) if lines > 0 else "\n".join(kept)


def check_tasks(
    tasks: Iterable[HarborTask], box: Any = None, *, mode: str = "sandbox", on_result: Any = None
) -> list[TaskCheck]:
    """Null and reference runs of every task (see the module's text); ``on_result(check)`` is
    called as each task's check ends."""
    from harbor_env.server import HarborEnvironment

    own = box is None
    if box is None:
        if mode == "container":
            from harbor_env.container import ContainerBox

            box = ContainerBox()
        else:
            box = HarborEnvironment.new_box()

    class _Out(list):  # type: ignore[type-arg]
        def append(self, item: TaskCheck) -> None:
            super().append(item)
            if on_result is not None:
                on_result(item)

    out = _Out()
    try:
        for task in tasks:
            t0 = time.perf_counter()
            problems = box.start(task)
            if problems:
                out.append(TaskCheck(task.id, 0.0, 0.0, problems[0], problems[0], time.perf_counter() - t0))
                continue
            null = box.verify()
            problems = box.start(task)
            if problems:
                out.append(TaskCheck(task.id, null.reward, 0.0, null.error, problems[0], time.perf_counter() - t0))
                continue
            played = box.oracle()
            ref_error = played.get("error") or (
                f"solve.sh exited {played.get('exit_code')}: {played.get('log', '')[-600:]}"
                if played.get("exit_code") != 0
                else None
            )
            ref = box.verify()
            out.append(
                TaskCheck(
                    task.id,
                    null.reward,
                    ref.reward,
                    null.error,
                    ref.error or ref_error,
                    time.perf_counter() - t0,
                    null_log=str(null.detail.get("log") or ""),
                    reference_log=str(ref.detail.get("log") or ""),
                )
            )
    finally:
        if own:
            box.close()
    return out


def refused_table(refused: list[tuple[str, str]]) -> str:
    """The refused tasks as a table: task, then the reason (the field or resource it names)."""
    width = max((len(t) for t, _ in refused), default=4)
    rows = [f"{'task'.ljust(width)}  why it cannot run here", f"{'-' * width}  {'-' * 22}"]
    for task_id, why in refused:
        short = why.split(": ", 1)[1] if why.startswith("task ") and ": " in why else why
        rows.append(f"{task_id.ljust(width)}  {short}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harbor-env", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="the reference solution passes and a null one fails, for every task")
    c.add_argument("tasks", help="a task, a directory of tasks or of splits, or a dataset with a registry.json")
    c.add_argument("--mode", choices=("sandbox", "container"), default=os.environ.get("HARBOR_MODE") or "sandbox",
                   help="how tasks run (default: $HARBOR_MODE, else sandbox)")  # fmt: skip
    c.add_argument("--task", action="append", default=[], help="check only this task (repeatable)")
    c.add_argument("--json", action="store_true", help="one JSON object per task")
    c.add_argument("-v", "--verbose", action="store_true", help="all of the verifier's output that was kept")
    c.add_argument("-q", "--quiet", action="store_true", help="no verifier output")
    ns = ap.parse_args(argv)
    refused: list[tuple[str, str]] = []
    try:
        taskset = load_tasks(ns.tasks, mode=ns.mode, refused=refused)
    except TaskError as e:
        print(f"harbor-env check: {e}", file=sys.stderr)
        return 2
    tasks = [t for t in taskset if not ns.task or t.id in ns.task]
    refused = [r for r in refused if not ns.task or r[0] in ns.task]

    def show(r: TaskCheck) -> None:
        if ns.json:
            print(json.dumps({**dataclasses.asdict(r), "ok": r.ok}), flush=True)
            return
        print(r.line(), flush=True)
        if not ns.quiet:
            for which, log in (("reference", r.reference_log), ("null", r.null_log)):
                text = _tail(log, 0 if ns.verbose else 6)
                print(f"     {which} verifier output:" + ("" if text else " (none)"))
                for line in text.splitlines():
                    print(f"       | {line}", flush=True)

    results = check_tasks(tasks, mode=ns.mode, on_result=show) if tasks else []
    if refused:
        if ns.json:
            for task_id, why in refused:
                print(json.dumps({"task_id": task_id, "refused": why, "ok": False}))
        else:
            print(f"\n{len(refused)} task(s) cannot run here:\n" + refused_table(refused))
    failed = [r.task_id for r in results if not r.ok]
    total = len(results) + len(refused)
    print(
        f"{len(results) - len(failed)}/{total} tasks ok"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + (f"; refused: {', '.join(t for t, _ in refused)}" if refused else "")
    )
    return 1 if failed or refused else 0


if __name__ == "__main__":
    sys.exit(main())
