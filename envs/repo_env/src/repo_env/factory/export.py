"""Exporting instances: as Harbor tasks (the published layout: ``task.toml``,
``instruction.md``, ``environment/Dockerfile``, ``solution/solve.sh``, ``tests/test.sh``) or as
SWE-bench-style JSON lines.

A Harbor task holds the buggy repository (``environment/repo/``, copied to ``/app``), the
pristine tree (``tests/pristine/``: the verifier's own copy of the package, tests included), the
reference fix (``solution/files/``, the pristine versions of the files the bug changed, and
``solution/fix.patch``). ``tests/test.sh`` grades like the environment does: the pristine tree
with only the agent's versions of the package's source modules laid over it, the
``fail_to_pass`` and ``pass_to_pass`` tests run with pytest, reward 1 when all pass (written
last, then exit 0).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from repo_env.factory.instances import Instance, InstanceSet, package_of, pristine, repository

__all__ = ["export_harbor", "export_jsonl"]

PYTEST_VERSION = "9.1.1"

_GRADE_PY = r'''"""The verifier of a repository-factory task: grade /app against the hidden tests."""
import json, os, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.environ.get("APP_DIR", "/app")
LOGS = os.environ.get("LOGS_DIR", "/logs/verifier")
spec = json.load(open(os.path.join(HERE, "spec.json")))
pristine = os.path.join(HERE, "pristine")
graded = tempfile.mkdtemp(prefix="graded-")
shutil.copytree(pristine, graded, dirs_exist_ok=True)
roots = tuple(r.rstrip("/") for r in spec["mutate"])
for dirpath, _, names in os.walk(pristine):
    for name in names:
        rel = os.path.relpath(os.path.join(dirpath, name), pristine)
        parts = rel.split(os.sep)
        if not rel.endswith(".py") or {"tests", "test", "testing"} & set(parts):
            continue
        if name.startswith(("test_", "conftest")):
            continue
        if not any(rel == r or rel.startswith(r + "/") for r in roots):
            continue
        mine = os.path.join(APP, rel)
        if os.path.isfile(mine) and not os.path.islink(mine):
            shutil.copyfile(mine, os.path.join(graded, rel))
out = os.path.join(tempfile.mkdtemp(prefix="results-"), "out.json")
tests = spec["fail_to_pass"] + spec["pass_to_pass"]
env = {**os.environ, "REPO_FACTORY_OUT": out, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
       "PYTHONPATH": os.path.join(graded, spec["import_root"]) + os.pathsep + HERE}
sel = os.path.join(os.path.dirname(out), "select.txt")
open(sel, "w").write("".join(t + "\n" for t in tests))
env["REPO_FACTORY_SELECT"] = sel
paths = sorted({t.split("::", 1)[0] for t in tests})
subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-p", "recorder",
                "--rootdir", graded, *paths], cwd=graded, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
               timeout=spec.get("timeout_sec", 600))
results = json.load(open(out)).get("results", {}) if os.path.isfile(out) else {}
ok = lambda t: results.get(t, {}).get("outcome") == "passed"
f2p = sum(map(ok, spec["fail_to_pass"])) / len(spec["fail_to_pass"])
p2p = sum(map(ok, spec["pass_to_pass"])) / max(len(spec["pass_to_pass"]), 1) if spec["pass_to_pass"] else 1.0
reward = 1.0 if f2p == 1.0 and p2p == 1.0 else 0.0
os.makedirs(LOGS, exist_ok=True)
with open(os.path.join(LOGS, "reward.json"), "w") as f:
    json.dump({"reward": reward, "fail_to_pass": f2p, "pass_to_pass": p2p}, f)
'''

_TEST_SH = """#!/bin/bash
# The verifier: the hidden tests on the pristine tree with the agent's source modules laid over it.
set -u
exec python3 "$(dirname "$0")/grade.py"
"""

_SOLVE_SH = """#!/bin/bash
# The reference fix: the pristine versions of the files the bug changed.
set -eu
SOLUTION="${SOLUTION_DIR:-/solution}"
cp -R "$SOLUTION/files/." "${APP_DIR:-/app}/"
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def export_harbor(
    instances: Sequence[Instance], out: str | Path, cache: str | None = None, packages: InstanceSet | None = None
) -> int:
    """Each instance as a Harbor task in ``out/<split>/<id>/`` (its package as ``packages``, the
    set it came from, records it); the number written."""
    from repo_env.factory import pytest_plugin

    out = Path(out)
    for inst in instances:
        pkg = package_of(inst, packages)
        d = out / inst.split / inst.id
        shutil.rmtree(d, ignore_errors=True)
        buggy, fix = repository(inst, pkg, cache)
        _write(d / "environment" / "repo", buggy)
        (d / "environment" / "Dockerfile").write_text(
            "FROM python:3.11-slim\n"
            f"RUN pip install --no-cache-dir pytest=={PYTEST_VERSION}\n"
            "WORKDIR /app\n"
            "COPY repo/ /app/\n",
            encoding="utf-8",
        )
        (d / "instruction.md").write_text(
            f"{inst.issue}\n\nThe repository in /app is the source of the Python package {pkg.name} {pkg.version} "
            f"(import root `{pkg.import_root}`, tests in {', '.join(pkg.tests)}; run them with `python3 -m pytest`). "
            "Fix the bug in the package's source.\n",
            encoding="utf-8",
        )
        (d / "task.toml").write_text(
            "[metadata]\n"
            'category = "swe"\n'
            f'difficulty = "{inst.tier}"\n'
            f"tags = {json.dumps(['repo-factory', pkg.name, *inst.operators])}\n"
            f'source = "repo_env.factory {inst.id}"\n\n'
            "[agent]\ntimeout_sec = 1800.0\n\n[verifier]\ntimeout_sec = 600.0\n",
            encoding="utf-8",
        )
        tests = d / "tests"
        _write(tests / "pristine", pristine(pkg, cache))
        spec = {"import_root": pkg.import_root, "mutate": list(pkg.mutate), "fail_to_pass": list(inst.fail_to_pass),
                "pass_to_pass": list(inst.pass_to_pass), "timeout_sec": 540}  # fmt: skip
        (tests / "spec.json").write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        (tests / "grade.py").write_text(_GRADE_PY, encoding="utf-8")
        shutil.copyfile(pytest_plugin.__file__, tests / "recorder.py")
        (tests / "test.sh").write_text(_TEST_SH, encoding="utf-8")
        _write(d / "solution" / "files", fix)
        (d / "solution" / "fix.patch").write_text(inst.patch, encoding="utf-8")
        (d / "solution" / "solve.sh").write_text(_SOLVE_SH, encoding="utf-8")
        for sh in (tests / "test.sh", d / "solution" / "solve.sh"):
            sh.chmod(0o755)
    return len(instances)


def export_jsonl(instances: Sequence[Instance], out: str | Path) -> int:
    """The instances as SWE-bench-style records (``instance_id``, ``repo``, ``version``,
    ``problem_statement``, ``patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, plus the factory's
    fields) in ``out/instances.jsonl``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "instances.jsonl").open("w", encoding="utf-8") as f:
        for i in instances:
            rec = {"instance_id": i.id, "repo": i.package, "version": i.version, "problem_statement": i.issue,
                   "patch": i.patch, "FAIL_TO_PASS": list(i.fail_to_pass), "PASS_TO_PASS": list(i.pass_to_pass),
                   "split": i.split, "tier": i.tier, "operators": list(i.operators)}  # fmt: skip
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    return len(instances)
