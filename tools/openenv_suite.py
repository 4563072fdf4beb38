#!/usr/bin/env python3
"""Run OpenEnv's own integration suite against this project's server (on demand; not in ``make test``).

OpenEnv's repository tests its server protocol in ``tests/envs/test_websockets.py``: ``/health``,
``/schema``, ``/reset``, ``/step``, ``/state`` over HTTP, its WebSocket client (connect, reset,
step, state, several episodes), concurrent sessions and the echo environment's tools. This
tool runs that file, unchanged, with OpenEnv's own client (the ``openenv`` 0.10.0 release, in
the cached venv of ``tools/openenv_upstream.py``, plus pytest), against

* ``ours``: ``openenv serve echo_env.server:EchoEnvironment --http-port PORT`` (this checkout's
  sources), put in place of the suite's ``run_server`` by ``tools/openenv_suite_plugin.py``;
* ``openenv``: OpenEnv's own server (the suite as written: uvicorn on its ``envs.echo_env``),

and prints each test's outcome on both, side by side. It selects the 13 tests that drive a
server with the echo environment (the concurrency ones included: the plugin lifts their
``skip``, since their fixture sets the ``MAX_CONCURRENT_ENVS`` they ask for). Exit status 0
when every test that passes against OpenEnv's server passes against ours (with ``--against``
one server: when every test passes).

The suite is never copied into this repository: it is read from OpenEnv's git history at the
pinned commit (:data:`PINNED`) into ``.cache/openenv-suite/<commit>/`` (gitignored), from a
local clone or bare mirror (``--openenv-git PATH``) or fetched by commit from a git URL
(``--openenv-git URL``; the default is OpenEnv's repository)::

    python tools/openenv_suite.py                                  # both servers
    python tools/openenv_suite.py --openenv-git ~/src/OpenEnv --against ours
    python tools/openenv_suite.py --json report.json
    make openenv-suite SUITE_ARGS="--openenv-git ~/src/OpenEnv"

The suite's ports are fixed (8100, 8101, 8102, 8200); a test whose port is taken fails with
that reason. docs/bridge.md records the last run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.openenv_upstream import ensure  # noqa: E402

OPENENV_GIT = "https://github.com/meta-pytorch/OpenEnv"
PINNED = "685de411e5f77286b0fd94798d42c4467cf8a1bc"
"""OpenEnv's ``main`` of 2026-05-01 ("Add note about HF env hub (#614)"): the suite and the echo
environment's client as they stand there (``test_websockets.py`` last changed in #485)."""

CLIENT = ("openenv", "0.10.0")
SUITE = "tests/envs/test_websockets.py"
PATHS = (SUITE, "envs/echo_env")
SELECT = (
    "TestProtocolHttpEndpoints or TestProtocolWebSocketClient or TestConcurrencyMultipleSessions or TestEchoEnvironment"
)
CACHE = Path(os.environ.get("OPENENV_SUITE_CACHE", ROOT / ".cache" / "openenv-suite"))


def _git(*args: str, cwd: Path | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.strip()[-2000:]}")
    return out.stdout


def _git_dir(source: str, commit: str) -> list[str]:
    """``git`` arguments that read a repository holding ``commit``: a local clone or bare
    mirror as it is, or a cache repository into which the commit is fetched from a URL."""
    path = Path(source).expanduser()
    if path.exists():
        gd = path / ".git" if (path / ".git").exists() else path
        return ["--git-dir", str(gd)]
    repo = CACHE / "git"
    if not (repo / "HEAD").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git("init", "--bare", "-q", str(repo))
    args = ["--git-dir", str(repo)]
    try:
        _git(*args, "cat-file", "-e", f"{commit}^{{commit}}")
    except RuntimeError:
        _git(*args, "fetch", "-q", "--depth", "1", source, commit)
    return args


def materialize(source: str, commit: str) -> Path:
    """The suite's files at ``commit`` under ``.cache/openenv-suite/<commit>/`` (made once)."""
    dest = CACHE / commit
    stamp = dest / ".complete"
    if stamp.exists():
        return dest
    args = _git_dir(source, commit)
    names = _git(*args, "ls-tree", "-r", "--name-only", commit, "--", *PATHS).split()
    if SUITE not in names:
        raise RuntimeError(f"{SUITE} is not at {commit} in {source}")
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="suite-", dir=CACHE))
    for name in names:
        blob = subprocess.run(
            ["git", *args, "show", f"{commit}:{name}"], capture_output=True, check=True, timeout=120
        ).stdout
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
    (tmp / "pytest.ini").write_text("[pytest]\n")  # the suite's own rootdir, not this repository's pytest.ini
    (tmp / ".complete").write_text(f"{source} {commit}\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def run(suite: Path, target: str, python: Path, out: Path) -> dict[str, str]:
    """Run the selected tests against ``target``; {test id: passed | failed | skipped | error}."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PYTHONPATH=str(ROOT / "tools"),  # the plugin only: never this project's ``openenv`` package
        OPENENV_SUITE_TARGET=target,
        OPENENV_SUITE_PYTHON=sys.executable,
        OPENENV_SUITE_PYTHONPATH=os.pathsep.join(
            [str(ROOT / "python" / "src"), str(ROOT / "envs" / "echo_env" / "src"), os.environ.get("PYTHONPATH", "")]
        ),
        GRPC_VERBOSITY="ERROR",
    )
    env.pop("ENABLE_WEB_INTERFACE", None)
    cmd = [str(python), "-m", "pytest", SUITE, "-p", "openenv_suite_plugin", "-p", "no:cacheprovider"]
    cmd += ["-k", SELECT, "-rA", "--tb=short", f"--junitxml={out}", "-o", "addopts="]
    print(f"\n=== OpenEnv's suite against {target}: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=suite, env=env, check=False, timeout=1800)
    results: dict[str, str] = {}
    for case in ET.parse(out).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcome = "passed"
        for tag, what in (("skipped", "skipped"), ("error", "error"), ("failure", "failed")):  # the worst wins
            if tag in tags:
                outcome = what
        results[name] = outcome
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--openenv-git", default=os.environ.get("OPENENV_GIT", OPENENV_GIT), help="clone, bare mirror or URL"
    )
    ap.add_argument("--commit", default=PINNED)
    ap.add_argument("--against", choices=("both", "ours", "openenv"), default="both")
    ap.add_argument("--json", type=Path, help="write the outcomes here")
    ns = ap.parse_args(argv)
    suite = materialize(ns.openenv_git, ns.commit)
    python = ensure(*CLIENT, extras=("pytest",), quiet=False)
    targets = ["ours", "openenv"] if ns.against == "both" else [ns.against]
    outcomes: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in targets:
            outcomes[t] = run(suite, t, python, Path(tmp) / f"{t}.xml")
    names = sorted({n for r in outcomes.values() for n in r})
    print(f"\nOpenEnv {ns.commit[:12]} {SUITE}, client {CLIENT[0]}=={CLIENT[1]}")
    print(f"{'test':<78}" + "".join(f"{t:>10}" for t in targets))
    for n in names:
        print(f"{n:<78}" + "".join(f"{outcomes[t].get(n, '-'):>10}" for t in targets))
    for t in targets:
        passed = sum(1 for v in outcomes[t].values() if v == "passed")
        print(f"{t}: {passed} of {len(outcomes[t])} passed")
    if ns.json:
        ns.json.write_text(
            json.dumps({"commit": ns.commit, "client": "==".join(CLIENT), "outcomes": outcomes}, indent=2)
        )
    if "ours" in outcomes and "openenv" in outcomes:
        missing = [n for n in names if outcomes["openenv"].get(n) == "passed" and outcomes["ours"].get(n) != "passed"]
        for n in missing:
            print(f"passes against OpenEnv's server, not against ours: {n}")
        return 1 if missing else 0
    return 0 if all(v in ("passed",) for r in outcomes.values() for v in r.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
