"""How the Makefile sets up .venv: `make demo` installs only what the demo runs, `make test` the
rest, and no install step is silent (tools/progress.py).

The Makefile is read the way make reads it: ``make --dry-run`` against a virtualenv path that
does not exist prints every recipe line that would run, and runs none of them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "[dev]", "[all]", "trl", "inspect", "npm ", "catalog", "conformance", "chromium")


def _dry_run(target: str, venv: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", target, f"VENV={venv}", f"PYTHON={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # The paths are the test's: only what make adds to them is checked.
    text = out.stdout.replace(str(venv), "VENV").replace(sys.executable, "PYTHON")
    text = re.sub(r"\\\n\s*", " ", text)  # a recipe line continued with a backslash is one command
    return [line for line in text.splitlines() if line.strip()]


def _installs(lines: list[str]) -> list[str]:
    pattern = r"\bpip install\b|\bpip_install\.py\b|\bnpm (install|ci)\b|\block\.py (bootstrap|install)\b"
    return [line for line in lines if re.search(pattern, line)]


def test_make_demo_installs_the_runtime_and_the_reference_environments_only(tmp_path: Path) -> None:
    """A fresh `make demo` installs protoenv[http] and the reference environments it serves:
    no torch, no trainer, no other extra, no npm agent CLI (those are `make test`'s)."""
    lines = _dry_run("demo", tmp_path / "venv")
    installs = _installs(lines)
    assert installs, lines
    heavy = [line for line in installs if any(h in line for h in HEAVY)]
    assert not heavy, heavy
    wanted = "-e 'python[http]' -e envs/echo_env -e envs/gridworld -e envs/math_env"
    assert any(wanted in line for line in installs), installs
    assert lines[-1].endswith("tools/demo.py"), lines[-1]


def test_make_test_still_installs_everything(tmp_path: Path) -> None:
    """`make test` (and CI's `make venv`) installs the lock, then every project of
    requirements/dev.in (torch's CPU build, every project with the extras its tests use)."""
    installs = _installs(_dry_run("venv", tmp_path / "venv"))
    assert any(line.endswith("tools/lock.py bootstrap") for line in installs), installs
    assert any(line.endswith("tools/lock.py install") for line in installs), installs
    dev_in = (ROOT / "requirements" / "dev.in").read_text().splitlines()
    assert "torch==2.13.0" in dev_in and "-e ./python[dev]" in dev_in and "-e ./catalog[all]" in dev_in
    for env in sorted(p.parent.name for p in ROOT.glob("envs/*/pyproject.toml")):
        assert f"-e ./envs/{env}" in dev_in, env


def test_no_install_step_resolves_outside_the_lock(tmp_path: Path) -> None:
    """Every Python install of `make demo` and `make venv` goes through tools/lock.py (exact
    pins, hashes checked): none asks pip or uv for a package by name or range."""
    for target in ("demo", "venv"):
        for line in _installs(_dry_run(target, tmp_path / target)):
            assert "tools/lock.py" in line or "npm install" in line, line


def test_every_install_step_reports_progress(tmp_path: Path) -> None:
    """pip and npm run under tools/progress.py, never with -q: their output passes through and
    a silence is broken by a 'still running' line."""
    for target in ("demo", "venv"):
        for line in _installs(_dry_run(target, tmp_path / target)):
            assert "tools/progress.py" in line, line
            assert not re.search(r"\s-q\b|--quiet", line), line


def test_progress_breaks_a_silence_and_passes_output_and_exit_code_through(tmp_path: Path) -> None:
    """A command that prints a line, then says nothing until released: progress.py prints a
    'still running' line (with the last line seen) while it waits, then its exit code."""
    release = tmp_path / "release"
    child = (
        "import os, sys, time\n"
        "print('resolving', flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
        "print('done', flush=True)\n"
        "sys.exit(3)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "progress.py"), "--every", "0.2", "--", sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:  # bounded by the test's timeout: the child waits for the file
            seen.append(line.rstrip("\n"))
            if "still running" in line:
                release.touch()
                break
        rest = proc.communicate(timeout=120)[0]
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
    seen += rest.splitlines()
    assert proc.returncode == 3
    assert "resolving" in seen and "done" in seen
    assert any("still running" in s and "resolving" in s for s in seen), seen
    assert "failed (exit 3)" in seen[-1]
