#!/usr/bin/env python3
"""Run a command and never stay silent: ``progress.py [--every S] [--label L] -- CMD...``.

The command's output (stdout and stderr, merged) passes through line by line; whenever it has
printed nothing for ``--every`` seconds (default 5), a line says it is still running, for how
long, and what it printed last (pip resolving, a large wheel downloading without a terminal,
npm fetching). Exits with the command's exit code. Standard library only: the Makefile runs it
with the system Python, before the virtualenv exists.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=5.0, help="seconds of silence before a 'still running' line")
    ap.add_argument("--label", help="what to call the command in those lines (default: its first words)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    cmd = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not cmd:
        ap.error("no command given")
    label = ns.label or " ".join(cmd[:4])
    start = time.monotonic()
    print(f"==> {label}", flush=True)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ.copy()
    )
    assert proc.stdout is not None
    state = {"last": time.monotonic(), "line": ""}
    lock = threading.Lock()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(min(1.0, ns.every)):
            with lock:
                if time.monotonic() - state["last"] >= ns.every:
                    elapsed = time.monotonic() - start
                    last = f" (last: {state['line'][:80]})" if state["line"] else ""
                    print(f"    ... {label}: still running, {elapsed:.0f} s{last}", flush=True)
                    state["last"] = time.monotonic()

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode(errors="replace").rstrip("\r\n")
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            state["last"] = time.monotonic()
            if line.strip():
                state["line"] = line.strip().splitlines()[-1]
    code = proc.wait()
    done.set()
    beat.join()
    print(f"<== {label}: {'done' if code == 0 else f'failed (exit {code})'} in {time.monotonic() - start:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
