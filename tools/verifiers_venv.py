#!/usr/bin/env python3
"""A cached, locked virtualenv holding Prime Intellect's ``verifiers`` beside this project's core.

Why a separate interpreter: verifiers pins ``mcp==2.0.0`` and the project's ``http`` extra needs
``mcp>=2.3``, so the two cannot share the development venv. This venv holds exactly
``requirements/upstream/verifiers-<version>.txt`` (hashes checked; ``make lock`` resolves it from
the ``.in`` beside it, which names verifiers and this repository's ``python/`` project, so the
lock carries the core's dependencies too) and this tree's ``openenv`` core installed editable
without dependencies (the gRPC client; no ``http`` extra, hence no mcp conflict).

It lives under ``.cache/verifiers/verifiers-<version>-<lock digest>/`` (gitignored): a changed
lock makes a new venv, an unchanged one is reused. The editable install follows this tree's
sources, so a changed ``python/src`` needs no rebuild.

Usage::

    python tools/verifiers_venv.py                # builds once, prints the interpreter

From Python (tests, ``openenv import verifiers:``'s tests)::

    from tools.verifiers_venv import ensure
    python = ensure()                             # Path of the venv's interpreter

What callers may rely on: the returned interpreter imports ``verifiers`` (the pinned release)
and ``openenv`` (this tree's core). The venv is built by ``tools/locked_venv.py`` (the project's
one venv builder: serialised creation, marked ready only after the install and the import
check; offline from uv's cache once its wheels were fetched). Raises ``RuntimeError`` with the
install log's tail when the install fails (no package index and no cached wheel).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locked_venv  # a sibling script: the one venv builder

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("OPENENV_VERIFIERS_CACHE", ROOT / ".cache" / "verifiers"))

#: The verifiers release the integration is checked against (docs/training.md).
VERSION = "0.4.0"

#: verifiers prepares its harnesses' helper programs (PEP 723 scripts, e.g. the ``null`` harness's
#: chat program) with ``uv sync --script``, a resolution of their own outside any lock. Whoever runs
#: verifiers from this venv passes :func:`script_env` so that resolution sees the package index as
#: it was on this date (uv's ``exclude-newer``) and never downloads an interpreter: the same
#: versions next month as today. Move it forward with the lock (a reviewed toolchain commit).
SCRIPTS_RESOLVED_AS_OF = "2026-12-07T00:00:00Z"

#: What a ready venv must import: the release, and this tree's gRPC client.
_IMPORT_CHECK = "import verifiers, openenv.client"


def lock_of(version: str = VERSION) -> Path:
    """The committed lock of that release with the core's dependencies (``make lock`` writes it)."""
    return ROOT / "requirements" / "upstream" / f"verifiers-{version}.txt"


def lock_digest(version: str = VERSION) -> str:
    """The first 16 hex digits of the lock's SHA-256: the cache key of its venv."""
    lock = lock_of(version)
    if not lock.is_file():
        raise RuntimeError(f"no lock for verifiers {version}: {lock} (add its .in, then `make lock UPGRADE=0`)")
    return locked_venv.lock_digest(lock)


def venv_dir(version: str = VERSION) -> Path:
    """Where the venv of that release (at its current lock) lives."""
    return CACHE / f"verifiers-{version}-{lock_digest(version)}"


def ensure(version: str = VERSION, *, timeout: float = 900.0, quiet: bool = True) -> Path:
    """Create (once per lock digest) and return the interpreter of the verifiers venv: exactly the
    lock (hashes checked), then the core from this tree, editable, without dependencies (they are
    in the lock: its .in names ./python)."""
    return locked_venv.ensure(
        venv_dir(version),
        stamp=f"verifiers=={version} lock {lock_digest(version)}\n",
        check=_IMPORT_CHECK,
        lock=lock_of(version),
        editable=(ROOT / "python",),
        timeout=timeout,
        quiet=quiet,
    )


def script_env() -> dict[str, str]:
    """Environment variables that pin verifiers' own ``uv sync --script`` resolutions (see above)."""
    return {"UV_EXCLUDE_NEWER": SCRIPTS_RESOLVED_AS_OF, "UV_PYTHON_DOWNLOADS": "never"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default=VERSION, help=f"verifiers release (default {VERSION})")
    ns = ap.parse_args(argv)
    print(ensure(ns.version, quiet=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
