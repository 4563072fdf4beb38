"""Check Harbor tasks: the reference solution passes its tests, a null solution does not.

``harbor-env check DIR`` (or :func:`check_tasks`) plays, for every task, in one sandbox per
working directory: a fresh starting state graded as it is (the null solution: nothing done; its
reward must be below 1), then a fresh starting state, ``solution/solve.sh`` (Harbor's oracle),
graded (its reward must be 1). Prints one line per task and exits 1 when any task fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterable

from harbor_env.sandbox import TaskBox
from harbor_env.server import HarborEnvironment
from harbor_env.task import HarborTask, load_tasks

__all__ = ["TaskCheck", "check_tasks", "main"]


@dataclasses.dataclass
class TaskCheck:
    task_id: str
    null_reward: float
    reference_reward: float
    null_error: str | None
    reference_error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.reference_reward >= 1.0 and self.null_reward < 1.0

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        why = "" if self.ok else f"  reference: {self.reference_error or '-'}; null: {self.null_error or '-'}"
        scores = f"reference {self.reference_reward:g}, null {self.null_reward:g}"
        return f"{mark} {self.task_id}: {scores} ({self.seconds:.1f} s){why}"


def check_tasks(tasks: Iterable[HarborTask], box: TaskBox | None = None) -> list[TaskCheck]:
    """Null and reference runs of every task (see the module's text)."""
    own = box is None
    box = box or HarborEnvironment.new_box()
    out = []
    try:
        for task in tasks:
            t0 = time.perf_counter()
            problems = box.start(task)
            if problems:
                out.append(TaskCheck(task.id, 0.0, 0.0, problems[0], problems[0], time.perf_counter() - t0))
                continue
            null = box.verify()
            box.start(task)
            played = box.oracle()
            ref_error = played.get("error") or (
                f"solve.sh exited {played.get('exit_code')}: {played.get('log', '')[-600:]}"
                if played.get("exit_code") != 0
                else None
            )
            ref = box.verify()
            out.append(
                TaskCheck(
                    task.id, null.reward, ref.reward, null.error, ref.error or ref_error, time.perf_counter() - t0
                )
            )
    finally:
        if own:
            box.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harbor-env", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="the reference solution passes and a null one fails, for every task")
    c.add_argument("tasks", help="a task directory, a directory of tasks, or a directory of splits")
    c.add_argument("--json", action="store_true", help="one JSON object per task")
    ns = ap.parse_args(argv)
    results = check_tasks(load_tasks(ns.tasks))
    for r in results:
        print(json.dumps({**dataclasses.asdict(r), "ok": r.ok}) if ns.json else r.line(), flush=True)
    failed = [r.task_id for r in results if not r.ok]
    print(
        f"{len(results) - len(failed)}/{len(results)} tasks ok" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
