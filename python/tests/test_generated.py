"""The contract's hygiene: committed generated code is fresh, buf lint passes, and the
proto is wire- and JSON-compatible with the previous commit (docs/protocol.md §10-11)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from openenv_testkit import REPO_ROOT

BIN = Path(sys.executable).parent


def _buf() -> str:
    buf = BIN / "buf"
    if buf.exists():
        return str(buf)
    found = shutil.which("buf")
    if found is None:
        pytest.fail("buf is not installed: `make venv` installs buf-bin (python[dev])")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_generated_code_is_fresh() -> None:
    r = _run(sys.executable, "tools/generate.py", "--check")
    assert r.returncode == 0, f"stale generated code; run `make generate`\n{r.stdout}\n{r.stderr}"


def test_buf_lint() -> None:
    r = _run(_buf(), "lint")
    assert r.returncode == 0, f"buf lint failed:\n{r.stdout}\n{r.stderr}"


def test_buf_breaking_against_the_previous_commit() -> None:
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: buf breaking needs the previous commit as its baseline")
    r = _run(sys.executable, "tools/buf_breaking.py")
    assert r.returncode == 0, f"buf breaking failed:\n{r.stdout}\n{r.stderr}"
