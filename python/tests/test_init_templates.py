"""``openenv init``'s printed next steps work from a documented install (the scaffold declares a
``test`` extra with pytest, and the printed command installs it), and ``--template tools``
scaffolds a tool environment whose own tests pass as they stand (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

WAIT_S = 120.0


def _init(parent: Path, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "openenv.cli", "init", *args, "--dir", str(parent)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=str(parent),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _test_extra(root: Path) -> list[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extra: list[str] = project["optional-dependencies"]["test"]
    return extra


def test_a_tool_environment_template_passes_its_own_tests_and_says_how_to_install_pytest(tmp_path: Path) -> None:
    out = _init(tmp_path, "number_tools", "--template", "tools")
    root = tmp_path / "number_tools"
    assert out[0] == f"created {root}"
    steps = out[out.index("next:") + 1 :]
    assert steps[:3] == [
        "  pip install -e 'number_tools[test]'",
        "  openenv certify python:number_tools.server:NumberToolsEnvironment"
        "   # the conformance checks, no Docker needed",
        "  python -m pytest number_tools/tests",
    ]
    assert "  openenv play number_tools.server:NumberToolsEnvironment   # by hand, in the terminal" in out
    assert any(r.startswith("pytest") for r in _test_extra(root))
    files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    expected = {"pyproject.toml", "README.md", "src/number_tools/server.py", "tests/test_number_tools.py"}
    assert expected <= files
    assert "Dockerfile" not in files  # openenv build renders the template (docs/images.md)
    assert not any(f.endswith(".proto") for f in files)  # nothing to generate
    assert not any("{{" in (root / f).read_text() for f in files)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=root,
        # A new project's pytest needs none of this environment's pytest plugins (loading them
        # all is most of the run's time).
        env={**os.environ, "PYTHONPATH": str(root / "src"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout


def test_the_message_template_declares_the_test_extra_its_next_step_installs(tmp_path: Path) -> None:
    out = _init(tmp_path, "number_messages")
    assert "  pip install -e 'number_messages[test]'" in out and "  python -m pytest number_messages/tests" in out
    assert "  openenv certify python:number_messages.server:NumberMessagesEnvironment" in " ".join(out)
    assert any(r.startswith("pytest") for r in _test_extra(tmp_path / "number_messages"))
