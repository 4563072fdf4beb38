#!/usr/bin/env python3
"""A cached virtualenv holding the real OpenEnv package from PyPI, apart from ours.

Two PyPI distributions ship the same ``openenv`` import package as this project
(``openenv`` and ``openenv-core``), so the upstream one can never live in the project's
venv. This tool creates one venv per (distribution, version) under
``.cache/openenv-upstream/<dist>-<version>/`` in the repository (gitignored), installs
the pinned release and exactly its locked dependencies (``requirements/upstream/<dist>-<version>.txt``,
written by ``make lock``), and reuses it on later runs. It is what the interop tests
(``python/tests/bridge``) and the benchmarks (``tools/bench_bridge.py``) call.

Usage::

    python tools/openenv_upstream.py                      # openenv 0.10.0, prints its python
    python tools/openenv_upstream.py --dist openenv-core --version 0.3.0

From Python::

    from tools.openenv_upstream import ensure
    python = ensure("openenv", "0.10.0")     # Path to the venv's interpreter

What callers may rely on: the returned interpreter imports ``openenv`` from that
release; creation is serialised with a file lock (parallel callers wait, then reuse
it); a venv is only marked ready after a successful install and import check, so an
interrupted install is redone next time.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("OPENENV_UPSTREAM_CACHE", ROOT / ".cache" / "openenv-upstream"))

#: The releases the project is checked against (see docs/bridge.md).
DEFAULT = ("openenv", "0.10.0")
RELEASES: tuple[tuple[str, str], ...] = (("openenv", "0.10.0"), ("openenv-core", "0.3.0"))

_STAMP = ".openenv-upstream-ready"


def venv_dir(dist: str, version: str, extras: tuple[str, ...] = ()) -> Path:
    """Where the venv of ``dist==version`` (plus ``extras`` packages) lives."""
    return CACHE / "+".join([f"{dist}-{version}", *extras])


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def _base_python() -> str:
    """A real interpreter (not a venv's) of the running Python version."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if Path(base).exists() else sys.executable


def _run(cmd: list[str], log: Path, timeout: float) -> None:
    with log.open("ab") as out:
        out.write(("\n$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        # The venv's own packages only: a PYTHONPATH naming this project's sources would shadow
        # OpenEnv's ``openenv`` package (the same import name).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False, env=env)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n--- log tail ---\n{tail}")


def lock_of(dist: str, version: str) -> Path:
    """The committed lock of that release's dependencies (``make lock`` writes it)."""
    return ROOT / "requirements" / "upstream" / f"{dist}-{version}.txt"


def _lock_stamp(dist: str, version: str, extras: tuple[str, ...]) -> str:
    """What a ready venv records: the release, its extras and its lock's content hash (a changed
    lock makes a new venv, as a changed release does)."""
    lock = lock_of(dist, version)
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16] if lock.is_file() else "unlocked"
    return f"{dist}=={version} {' '.join(extras)} lock {digest}\n"


def ensure(
    dist: str = DEFAULT[0],
    version: str = DEFAULT[1],
    *,
    extras: tuple[str, ...] = (),
    timeout: float = 900.0,
    quiet: bool = True,
) -> Path:
    """Create (once) and return the interpreter of a venv with ``dist==version`` installed.

    ``extras`` are more packages installed beside it (e.g. ``("uvloop", "httptools")``
    for the benchmark's tuned OpenEnv); each combination is its own venv. Raises
    ``RuntimeError`` (with the pip log tail) when the install fails, e.g. without access
    to the package index.
    """
    venv = venv_dir(dist, version, extras)
    py = python_of(venv)
    stamp = _lock_stamp(dist, version, extras)

    def ready() -> bool:
        return py.exists() and (venv / _STAMP).is_file() and (venv / _STAMP).read_text() == stamp

    if ready():
        return py
    CACHE.mkdir(parents=True, exist_ok=True)
    lock_path = CACHE / f"{venv.name}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if ready():
                return py
            if venv.exists():
                shutil.rmtree(venv)
            log = CACHE / f"{venv.name}.log"
            log.write_text("")
            t0 = time.monotonic()
            if not quiet:
                print(f"creating {venv} ({dist}=={version}); log: {log}", file=sys.stderr)
            _run([_base_python(), "-m", "venv", str(venv)], log, 120)
            # With uv when there is one (tools/pip_install.py: pip's configuration, ~3x faster).
            install = [sys.executable, str(Path(__file__).with_name("pip_install.py")), "--python", str(py)]
            pinned = lock_of(dist, version)
            if pinned.is_file():
                # Exactly the locked dependencies (hashes checked), the release among them; extras
                # (the benchmark's) within those pins. A release without a lock resolves as declared.
                _run([*install, "-r", str(pinned)], log, timeout)
                if extras:
                    _run([*install, "-c", str(pinned), *extras], log, timeout)
            else:
                _run([*install, f"{dist}=={version}", *extras], log, timeout)
            _run([str(py), "-c", "import openenv.core.env_server, openenv.core.env_client"], log, 300)
            (venv / _STAMP).write_text(stamp)
            if not quiet:
                print(f"ready in {time.monotonic() - t0:.0f} s: {py}", file=sys.stderr)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return py


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dist", default=DEFAULT[0], choices=sorted({d for d, _ in RELEASES}))
    ap.add_argument("--version", default=None, help="release (default: the pinned one for --dist)")
    ap.add_argument("--all", action="store_true", help="create the venvs of every pinned release")
    ns = ap.parse_args(argv)
    if ns.all:
        for d, v in RELEASES:
            print(ensure(d, v, quiet=False))
        return 0
    version = ns.version or dict(RELEASES)[ns.dist]
    print(ensure(ns.dist, version, quiet=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
