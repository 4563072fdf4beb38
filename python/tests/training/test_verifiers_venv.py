"""verifiers' own interpreter (tools/verifiers_venv.py): verifiers pins mcp==2.0.0, the project's
http extra needs mcp>=2.3, so verifiers runs from a separate venv built from its committed lock.
These tests hold the builder to what its callers (the verifiers integration's tests, `openenv
import verifiers:`'s) rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools import locked_venv, verifiers_venv  # noqa: E402

pytestmark = pytest.mark.slow


def _probe(python: Path) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m, openenv, verifiers;"
        "print(json.dumps({'verifiers': m.version('verifiers'), 'mcp': m.version('mcp'),"
        " 'openenv': openenv.__file__}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_verifiers_interpreter_holds_the_locked_release_and_this_trees_core() -> None:
    """What `ensure()` returns imports the pinned verifiers with its own mcp (the reason it is a
    separate venv) and the openenv of this very tree (editable), not a copy from an index."""
    python = verifiers_venv.ensure()
    assert python.is_file() and python != Path(sys.executable)
    found = _probe(python)
    assert found["verifiers"] == verifiers_venv.VERSION
    locked = {
        line.split("==")[0]: line.split("==")[1].split()[0]
        for line in verifiers_venv.lock_of().read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    assert found["mcp"] == locked["mcp"]  # the lock's, which the dev venv's mcp>=2.3 could not hold
    assert Path(found["openenv"]).resolve().is_relative_to(REPO / "python" / "src")


def test_the_venv_is_keyed_by_the_lock_digest_and_reused() -> None:
    """A second call reuses the venv (same path, marked ready); its directory names the lock's
    digest, so a changed lock builds a new venv rather than trusting a stale one."""
    first = verifiers_venv.ensure()
    assert verifiers_venv.ensure() == first
    assert verifiers_venv.lock_digest() in first.parent.parent.name
    assert (locked_venv.stamp_of(first.parent.parent) or "").endswith(f"{verifiers_venv.lock_digest()}\n")
