"""Running a package's own tests on a tree: one pytest session per call, in a forked child of a
process that imported pytest once (the package is imported only in the child, so every run
sees the files as they are on disk), with the factory's plugin recording each test's outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["RunOutcome", "run_tests"]

#: pytest's options for every run: no cache written into the tree, the package's own addopts
#: off (coverage, doctest-modules, xdist flags the factory does not have), short summaries.
PYTEST_ARGS = ("-p", "no:cacheprovider", "-o", "addopts=", "-q", "-p", "repo_env.factory.pytest_plugin")


@dataclasses.dataclass
class RunOutcome:
    """One run: ``results`` (nodeid -> {"outcome", "message"}), ``calls`` (nodeid -> the
    package's functions it ran, when traced), pytest's exit status, whether the run was killed
    at its time limit, and its wall time."""

    results: dict[str, dict[str, str]]
    calls: dict[str, list[str]]
    exitstatus: int
    timed_out: bool
    seconds: float

    def outcome(self, nodeid: str) -> str:
        r = self.results.get(nodeid)
        return r["outcome"] if r else "missing"


def run_tests(
    tree: str | os.PathLike[str],
    *,
    import_root: str = ".",
    testpaths: Sequence[str] = ("tests",),
    ignore: Sequence[str] = (),
    select: Sequence[str] | None = None,
    trace: str | None = None,
    timeout_s: float = 120.0,
    files: Mapping[str, str] | None = None,
) -> RunOutcome:
    """Run the tests of the package in ``tree`` (``testpaths`` relative to it, ``ignore``d
    paths left out; only the node ids in ``select`` when given), with ``files`` (path -> text)
    written over the tree for this run only and restored after. ``trace`` (a directory of the
    tree) records each test's calls of functions under it."""
    tree = Path(tree)
    saved: dict[Path, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="repo-factory-") as tmp:
        out = Path(tmp) / "out.json"
        env = {"REPO_FACTORY_OUT": str(out)}
        if select is not None:
            (Path(tmp) / "select.txt").write_text("".join(f"{s}\n" for s in select), encoding="utf-8")
            env["REPO_FACTORY_SELECT"] = str(Path(tmp) / "select.txt")
        if trace:
            env["REPO_FACTORY_TRACE"] = str(tree / trace)
        args = [*PYTEST_ARGS, f"--rootdir={tree}", *(f"--ignore={tree / i}" for i in ignore)]
        args += [str(tree / t) for t in testpaths]
        try:
            for rel, text in (files or {}).items():
                p = tree / rel
                saved[p] = p.read_bytes()
                p.write_text(text, encoding="utf-8")
            start = time.monotonic()
            timed_out, status = _fork_pytest(tree, str(tree / import_root), args, env, timeout_s)
            seconds = time.monotonic() - start
        finally:
            for p, data in saved.items():
                p.write_bytes(data)
        data: dict[str, Any] = {}
        if out.is_file():
            with contextlib.suppress(ValueError):
                data = json.loads(out.read_text(encoding="utf-8"))
    return RunOutcome(
        dict(data.get("results") or {}),
        dict(data.get("calls") or {}),
        int(data.get("exitstatus", status)),
        timed_out,
        seconds,
    )


def _fork_pytest(
    cwd: Path, import_root: str, args: list[str], env: Mapping[str, str], timeout_s: float
) -> tuple[bool, int]:
    """pytest.main(args) in a forked child (its own process group, stdout and stderr to
    /dev/null), killed with its group after ``timeout_s``; (timed out, exit status)."""
    import pytest

    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 3
        try:
            os.setpgid(0, 0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            # and the Python streams too (a test session capturing them in-process has its own)
            sys.stdin = open(os.devnull)
            sys.stdout = sys.stderr = open(os.devnull, "w")
            os.chdir(cwd)
            os.environ.update(env)
            os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            os.environ.setdefault("PYTHONHASHSEED", "0")
            sys.dont_write_bytecode = True
            sys.path.insert(0, import_root)
            code = int(pytest.main(args))
        except BaseException:  # noqa: BLE001 -- anything the tests did: the status says so
            code = 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return False, os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return True, -9
        time.sleep(0.02)
