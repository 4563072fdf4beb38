"""What a sandboxed call costs (part of ``make bench``), side by side in one run.

Per system, alternating, ``--repeats`` rounds of ``--calls`` calls each; medians of the per-call
wall time, from the caller's side:

* ``bare interpreter``: ``python -I -S -c <code>`` in a fresh process, no confinement (the
  floor any per-call process pays);
* ``previous sandbox``: coding_env's sandbox before openenv.sandbox (a fresh confined process
  per call: rlimits, Landlock, seccomp, no namespaces), loaded from git history
  (``git show BASE:envs/coding_env/src/coding_env/{sandbox,_runner}.py``); skipped when the
  checkout has no such commit;
* ``openenv.sandbox, warm``: a call in a session's running sandbox (fork from its supervisor,
  confinement, kill-all and clean-up after);
* ``openenv.sandbox, function call``: a function called on 5 cases in lock step;
* ``openenv.sandbox, fresh``: a new sandbox started, one call, closed (what ``submit`` pays).

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "d8b21f1"  # the last commit with coding_env's previous sandbox
CODE = "x = sum(range(1000))\n"


def _previous_sandbox(tmp: Path) -> Any | None:
    """coding_env's previous sandbox module, from git history (None when unavailable)."""
    files = {}
    for name in ("sandbox.py", "_runner.py"):
        got = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{BEFORE}:envs/coding_env/src/coding_env/{name}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if got.returncode != 0:
            return None
        files[name] = got.stdout
    for name, text in files.items():
        (tmp / name).write_text(text)
    spec = importlib.util.spec_from_file_location("previous_sandbox", tmp / "sandbox.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["previous_sandbox"] = mod
    spec.loader.exec_module(mod)
    return mod


def _per_call(fn: Callable[[], object], calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ns = ap.parse_args()

    from openenv.sandbox import Sandbox

    systems: dict[str, Callable[[], object]] = {}
    python = Sandbox()._python or sys.executable
    systems["bare interpreter"] = lambda: subprocess.run([python, "-I", "-S", "-c", CODE], check=True)
    with tempfile.TemporaryDirectory() as d:
        previous = _previous_sandbox(Path(d))
        old_box = previous.Sandbox() if previous is not None else None
        if old_box is not None:
            systems["previous sandbox (fresh process per call)"] = lambda: old_box.run(CODE)
        warm = Sandbox()
        warm.start()
        systems["openenv.sandbox, warm (a call in the session's sandbox)"] = lambda: warm.run(CODE)
        cases = [[i, i + 1] for i in range(5)]
        systems["openenv.sandbox, function call (5 cases in lock step)"] = lambda: warm.call_function(
            "def f(a, b):\n    return a + b\n", "f", cases
        )

        def fresh() -> None:
            with Sandbox() as box:
                box.run(CODE)

        systems["openenv.sandbox, fresh (start, one call, close)"] = fresh
        samples: dict[str, list[float]] = {k: [] for k in systems}
        for _ in range(ns.repeats):
            for name, fn in systems.items():
                calls = max(2, ns.calls // 4) if "fresh" in name else ns.calls
                samples[name].append(_per_call(fn, calls))
        warm.close()
        if old_box is not None:
            old_box.close()
    base = statistics.median(samples["bare interpreter"])
    out = {
        name: {"ms_per_call": statistics.median(v) * 1000, "vs_bare": statistics.median(v) / base}
        for name, v in samples.items()
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
