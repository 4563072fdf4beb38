"""The repository's conftest.py, as `make test` uses it: grouped tests stay on one xdist worker,
a pytest that would silently spread them stops the run instead, and the time of each area of the
suite is printed at the end (CI's log breaks a slow run down by it).

Each test runs pytest itself, in a subprocess, on a scratch tree holding a copy of the real
conftest.py and a few tests laid out like the repository's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_TEST = """import os
import pathlib

import pytest


@pytest.mark.parametrize("i", range(8))
def test_{name}(i):
    with open(pathlib.Path(__file__).parents[{up}] / "workers.log", "a") as f:
        f.write("{name} " + os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
"""


def _tree(tmp: Path, extra_conftest: str = "") -> Path:
    (tmp / "conftest.py").write_text((ROOT / "conftest.py").read_text() + extra_conftest)
    (tmp / "pytest.ini").write_text("[pytest]\naddopts = --import-mode=importlib -p no:cacheprovider\n")
    for rel, name, up in (
        ("python/tests/docker/test_images.py", "docker", 3),
        ("python/tests/test_typescript.py", "typescript", 2),
        ("python/tests/test_plain.py", "plain", 2),
        ("envs/some_env/tests/test_env.py", "env", 3),
    ):
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_TEST.format(name=name, up=up))
    return tmp


def _pytest(tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _workers(tmp: Path) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for line in (tmp / "workers.log").read_text().splitlines():
        name, worker = line.split()
        seen.setdefault(name, set()).add(worker)
    return seen


def test_each_group_runs_on_one_worker_and_the_rest_spreads(tmp_path: Path) -> None:
    """The docker and typescript tests (by path) each stay on one worker; ungrouped tests
    are shared out (with 16 of them on 2 workers, both get some)."""
    r = _pytest(_tree(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    seen = _workers(tmp_path)
    assert len(seen["docker"]) == 1 and len(seen["typescript"]) == 1, seen
    assert seen["plain"] | seen["env"] == {"gw0", "gw1"}, seen


def test_a_pytest_that_drops_the_group_tag_stops_the_run(tmp_path: Path) -> None:
    """Where pytest-xdist's rename of a grouped test does not take (pytest 9.2 keeps the id
    elsewhere), the run stops at collection and says why, rather than spreading the groups."""
    undo = """

@pytest.hookimpl(wrapper=True, specname="pytest_collection_modifyitems")
def pytest_undo_group_tags(config, items):
    yield
    for item in items:  # as if the rename to <id>@<group> had not taken
        item._nodeid = item._nodeid.split("@")[0]
"""
    r = _pytest(_tree(tmp_path, undo))
    assert r.returncode != 0
    assert "did not tag" in r.stdout + r.stderr and "xdist_group would be spread" in r.stdout + r.stderr
    assert not (tmp_path / "workers.log").exists()


def test_the_time_of_each_area_is_printed_at_the_end(tmp_path: Path) -> None:
    """The summary table names each area with its number of tests: the groups (docker,
    typescript) apart from their directories' area."""
    r = _pytest(_tree(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    table = r.stdout.split("test time per area", 1)[1]
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s+[\d.]+\s+\d+%", table, re.M)}
    assert rows == {"python": 8, "envs": 8, "docker": 8, "typescript": 8}, table
    assert re.search(r"^all\s+32\s", table, re.M), table
