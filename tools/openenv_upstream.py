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
release; the venv is built by ``tools/locked_venv.py`` (the project's one venv builder:
serialised creation, marked ready only after the install and the import check).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locked_venv  # a sibling script: the one venv builder

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("OPENENV_UPSTREAM_CACHE", ROOT / ".cache" / "openenv-upstream"))

#: The releases the project is checked against (see docs/bridge.md).
DEFAULT = ("openenv", "0.10.0")
RELEASES: tuple[tuple[str, str], ...] = (("openenv", "0.10.0"), ("openenv-core", "0.3.0"))

python_of = locked_venv.python_of


def venv_dir(dist: str, version: str, extras: tuple[str, ...] = ()) -> Path:
    """Where the venv of ``dist==version`` (plus ``extras`` packages) lives."""
    return CACHE / "+".join([f"{dist}-{version}", *extras])


def lock_of(dist: str, version: str) -> Path:
    """The committed lock of that release's dependencies (``make lock`` writes it)."""
    return ROOT / "requirements" / "upstream" / f"{dist}-{version}.txt"


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
    for the benchmark's tuned OpenEnv), within the lock's pins; each combination is its own
    venv. A release without a lock resolves as declared. Raises ``RuntimeError`` (with the
    install log's tail) when the install fails, e.g. without access to the package index."""
    lock = lock_of(dist, version)
    locked = lock.is_file()
    # The release, its extras and its lock's content: a changed lock makes a new venv.
    digest = locked_venv.lock_digest(lock) if locked else "unlocked"
    return locked_venv.ensure(
        venv_dir(dist, version, extras),
        stamp=f"{dist}=={version} {' '.join(extras)} lock {digest}\n",
        check="import openenv.core.env_server, openenv.core.env_client",
        lock=lock if locked else None,
        requirements=() if locked else (f"{dist}=={version}",),
        extras=extras,
        timeout=timeout,
        quiet=quiet,
    )


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
