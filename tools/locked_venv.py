#!/usr/bin/env python3
"""The one builder of the project's side virtualenvs: a cached venv installed from a committed lock.

Some packages the project works with cannot live in its development venv: the upstream OpenEnv
(``tools/openenv_upstream.py``: the same ``openenv`` import name as ours) and verifiers
(``tools/verifiers_venv.py``: it pins ``mcp==2.0.0``, our ``http`` extra needs ``mcp>=2.3``). Each
gets a venv of its own under ``.cache/`` (gitignored), built by :func:`ensure` here, which those
two tools call with their own lock, directory and import check.

What callers may rely on: the venv holds exactly the lock's pins (hashes checked; installed
with ``tools/pip_install.py``: uv reading pip's configuration, so it works offline from uv's
cache once the wheels were fetched), then the ``extras`` within those pins, then ``editable``
projects without their dependencies; creation is serialised with a file lock (parallel callers
wait, then reuse it); a venv is marked ready (its stamp) only after the install and the import
check succeeded, so an interrupted install is redone next time, and a changed stamp (a changed
lock) rebuilds it. Raises ``RuntimeError`` with the install log's tail when a step fails (e.g.
no package index and no cached wheel).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_STAMP = ".locked-venv-ready"


def python_of(venv: Path) -> Path:
    """The interpreter of a venv."""
    return venv / "bin" / "python"


def lock_digest(lock: Path) -> str:
    """The first 16 hex digits of a lock's SHA-256 (what a venv built from it records)."""
    return hashlib.sha256(lock.read_bytes()).hexdigest()[:16]


def stamp_of(venv: Path) -> str | None:
    """What a ready venv recorded (None: not ready)."""
    path = venv / _STAMP
    return path.read_text() if path.is_file() else None


def _base_python() -> str:
    """A real interpreter (not a venv's) of the running Python version."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if Path(base).exists() else sys.executable


def _run(cmd: list[str], log: Path, timeout: float) -> None:
    with log.open("ab") as out:
        out.write(("\n$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        # The venv's own packages only: a PYTHONPATH naming this project's sources would shadow
        # another ``openenv`` package (the upstream one has the same import name).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False, env=env)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n--- log tail ---\n{tail}")


def ensure(
    venv: Path,
    *,
    stamp: str,
    check: str,
    lock: Path | None = None,
    requirements: Sequence[str] = (),
    extras: Sequence[str] = (),
    editable: Sequence[Path] = (),
    timeout: float = 900.0,
    quiet: bool = True,
) -> Path:
    """Create (once per ``stamp``) and return the interpreter of ``venv``.

    Installs ``lock`` (``-r``, hashes checked) or, without one, ``requirements`` as declared; then
    ``extras`` (constrained by the lock when there is one), then each ``editable`` project
    without dependencies (the lock holds them); runs ``check`` (Python code) in the venv; then
    writes ``stamp``. A venv whose stamp differs is removed and built again."""
    py = python_of(venv)

    def ready() -> bool:
        return py.exists() and stamp_of(venv) == stamp

    if ready():
        return py
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"{venv.name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            if ready():
                return py
            if venv.exists():
                shutil.rmtree(venv)
            log = venv.parent / f"{venv.name}.log"
            log.write_text("")
            t0 = time.monotonic()
            if not quiet:
                print(f"creating {venv}; log: {log}", file=sys.stderr)
            _run([_base_python(), "-m", "venv", str(venv)], log, 120)
            install = [sys.executable, str(Path(__file__).with_name("pip_install.py")), "--python", str(py)]
            if lock is not None:
                _run([*install, "-r", str(lock)], log, timeout)
                if extras:
                    _run([*install, "-c", str(lock), *extras], log, timeout)
            else:
                _run([*install, *requirements, *extras], log, timeout)
            for project in editable:
                _run([*install, "--no-deps", "-e", str(project)], log, timeout)
            _run([str(py), "-c", check], log, 300)
            (venv / _STAMP).write_text(stamp)
            if not quiet:
                print(f"ready in {time.monotonic() - t0:.0f} s: {py}", file=sys.stderr)
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    return py
