#!/usr/bin/env python3
"""Run the test suite the way a loaded CI machine would: ``make test-stress``.

1. Starts one CPU hog per core (busy loops, so every test competes for the CPU).
2. Runs the tests marked ``timing`` (sensitive to scheduling by nature: idle reaping,
   keepalives, pipelining, event-loop hand-offs, mutants) ``--repeat`` times in a row.
3. Runs the whole suite ``--runs`` times in a row.
Prints one line per run and the tally; exits 1 if any run failed. The hogs stop with it.

Options: ``--hogs N`` (default: the number of cores), ``--no-full`` (timing tests only),
``--pytest-args "..."`` (extra pytest arguments, e.g. ``-k vector``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _hog() -> None:
    os.nice(0)
    while True:
        pass


def _pytest(args: list[str], label: str) -> bool:
    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    tail = [line for line in r.stdout.splitlines() if line.startswith(("FAILED", "ERROR", "=")) and line.strip("= ")]
    verdict = "passed" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
    print(f"{label}: {verdict} in {time.monotonic() - started:.0f} s  {tail[-1] if tail else ''}", flush=True)
    if r.returncode != 0:
        print("\n".join(tail[-30:]) or r.stdout[-4000:], flush=True)
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1, help="full suite runs in a row")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of the timing-marked tests")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="CPU hog processes")
    ap.add_argument("--no-full", action="store_true", help="only the timing-marked tests")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments")
    ns = ap.parse_args()
    extra = shlex.split(ns.pytest_args)
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(ns.hogs)]
    for h in hogs:
        h.start()
    print(f"{ns.hogs} CPU hog(s) running; load average {os.getloadavg()[0]:.1f}", flush=True)
    results: list[bool] = []
    try:
        for i in range(ns.repeat):
            results.append(_pytest(["-m", "timing", *extra], f"timing tests, repetition {i + 1}/{ns.repeat}"))
        if not ns.no_full:
            for i in range(ns.runs):
                results.append(_pytest(extra, f"full suite, run {i + 1}/{ns.runs}"))
    finally:
        for h in hogs:
            h.terminate()
    print(f"stress: {sum(results)} of {len(results)} runs passed under {ns.hogs} CPU hog(s)")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
