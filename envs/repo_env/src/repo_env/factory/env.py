"""repo_env serving the factory's instances: a real package's repository with a planted bug,
graded by the package's own tests behind the grading boundary (RFC 0015).

Everything of :class:`~repo_env.server.RepoEnvironment` (the tools, strict feedback by default,
the sandbox, the gate rubric), with:

* **the repository**: the package's pristine tree (its sdist's text files) with the bug
  planted; ``run_tests(tests)`` runs pytest in the sandbox on the agent's files;
* **what is graded** (:func:`graded_files`): the pristine tree with only the agent's changes to
  the package's *source modules* laid over it; its tests, ``conftest.py`` files, configuration
  and any new file come from the server's pristine copy. Deleting, skipping or rewriting tests
  changes nothing graded;
* **the hidden tests**: each ``fail_to_pass`` test alone, then the ``pass_to_pass`` tests
  together, each run a fresh confined process on an emptied workspace with a clean copy of the
  graded files (one sandbox call of :data:`FACTORY_GRADER`, which imports pytest before the
  workspace is importable); the call answers each test's raw outcome (``"passed"``,
  ``"failed"``, ...), the server compares it with ``"passed"``; a call that crashed, was killed
  or ran out of time fails all of its tests;
* **the test machinery out of reach** (:func:`tampering`): a fix whose changed modules reach for
  names no bug fix needs and test tampering does (``pytest``, ``builtins``, ``sys.modules``,
  frames, ``__subclasses__``, ``getattr``/``setattr``, ``exec``, ``os._exit``, ... not in the
  pristine module) earns 0 without running;
* reward 1 when every hidden test passes, else 0 (partial credit: the documented opt-in).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.metadata
import os
import random
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import openenv
from openenv.sandbox import (
    FunctionResult,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    WorkspaceFiles,
    clean_copy,
    put_files,
)
from repo_env.diff import git_diff
from repo_env.factory.instances import Instance, InstanceSet, load_instances, package_of, repository
from repo_env.factory.sources import Package
from repo_env.server import _SUBMIT, RepoEnvironment, Verdict, _writes
from repo_env.tasks import Check, Task, TaskSet

__all__ = ["FACTORY_GRADER", "FactoryEnvironment", "FactoryTask", "graded_files", "tampering", "testdeps"]

#: The distributions pytest needs, copied into a directory the sandbox may read.
TEST_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")

#: One hidden test run: loaded in a fresh confined process on a clean copy of the graded files;
#: pytest is imported, and the recorder built, before the workspace is on ``sys.path``. It
#: answers each selected test's raw outcome; the server compares.
FACTORY_GRADER = r"""
import sys
sys.path[:] = [p for p in sys.path if p and not p.startswith(("/workspace", "."))]
import os
sys.path.insert(0, os.environ["REPO_FACTORY_TESTDEPS"])
import pytest
_frozenset, _dict = frozenset, dict


def check(nodeids, import_root, testpaths):
    wanted = _frozenset(nodeids)
    seen = _dict()

    class Recorder:
        def pytest_collection_modifyitems(self, config, items):
            items[:] = [i for i in items if i.nodeid in wanted]

        def pytest_runtest_logreport(self, report):
            if report.when == "call":
                seen[report.nodeid] = report.outcome
            elif report.failed:
                seen[report.nodeid] = "error"
            elif report.skipped:
                seen[report.nodeid] = "skipped"

    os.chdir("/workspace")
    sys.path.insert(0, "/workspace" if import_root in ("", ".") else "/workspace/" + import_root)
    sys.dont_write_bytecode = True
    args = ["-p", "no:cacheprovider", "-o", "addopts=", "-q", "--rootdir=/workspace", *testpaths]
    pytest.main(args, plugins=[Recorder()])
    return {n: seen.get(n, "missing") for n in nodeids}
"""

#: Names a fix of a planted bug never needs and tampering with the test machinery does: a
#: changed module that uses one its pristine version does not earns 0.
TAMPERING_NAMES = frozenset(
    {
        "pytest", "_pytest", "unittest", "builtins", "__builtins__", "__import__", "importlib", "inspect", "gc",
        "ctypes", "exec", "eval", "compile", "globals", "locals", "vars", "getattr", "setattr", "delattr",
        "settrace", "setprofile", "_getframe", "f_back", "f_globals", "f_locals", "f_code", "modules", "atexit",
        "signal", "faulthandler", "_exit", "kill", "subprocess", "__subclasses__", "__globals__", "__code__",
        "__bases__", "__mro__", "__base__", "__class__", "__dict__", "__getattribute__", "__closure__",
        "__loader__", "__spec__", "sys",
    }
)  # fmt: skip


def _names(text: str) -> set[str] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] + (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            )
            for m in mods:
                out.update(m.split("."))
            out.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.update(w for w in TAMPERING_NAMES if w in node.value)
    return out


def tampering(pristine: Mapping[str, str], changed: Mapping[str, str]) -> list[str]:
    """What the changed modules reach for that their pristine versions do not (``path: name``),
    or that does not parse; [] for an honest fix."""
    found = []
    for path, text in sorted(changed.items()):
        new = _names(text)
        if new is None:
            continue  # a module that does not parse fails its tests on its own
        old = _names(pristine.get(path, "")) or set()
        found += [f"{path}: {n}" for n in sorted((new - old) & TAMPERING_NAMES)]
    return found


def graded_files(
    pkg: Package, pristine: Mapping[str, str], files: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(what is graded, the source modules the agent changed): the pristine tree with the
    agent's versions of the package's existing source modules (``.py`` files under its
    ``mutate`` paths, never a test or a ``conftest.py``) laid over it; every other file, tests
    included, is the pristine one, and files the agent added or deleted do not count."""
    roots = tuple(m.rstrip("/") for m in pkg.mutate)
    changed = {}
    for path, text in files.items():
        if path not in pristine or text == pristine[path] or not path.endswith(".py"):
            continue
        parts = Path(path).parts
        if {"tests", "test", "testing"} & set(parts) or parts[-1].startswith(("test_", "conftest")):
            continue
        if any(path == r or path.startswith(r + "/") for r in roots):
            changed[path] = text
    return {**pristine, **changed}, changed


@functools.lru_cache(maxsize=1)
def testdeps() -> str:
    """A directory holding pytest and what it needs, which the sandbox mounts read-only:
    ``$REPO_FACTORY_TESTDEPS`` (an image's), else one copied from this interpreter's installed
    distributions (no network) under this interpreter's prefix (``share/openenv/repo-factory/``),
    once per version: a directory the sandbox's own user can read (not under ``/tmp``, which the
    sandbox has its own of, nor a private home)."""
    if os.environ.get("REPO_FACTORY_TESTDEPS"):  # an image's, made when it was built
        return os.environ["REPO_FACTORY_TESTDEPS"]
    versions = "-".join(f"{d}{importlib.metadata.version(d)}" for d in TEST_DISTRIBUTIONS)
    target = (
        Path(sys.prefix)
        / "share"
        / "openenv"
        / "repo-factory"
        / f"testdeps-py{sys.version_info[0]}{sys.version_info[1]}-{versions}"
    )
    if (target / ".complete").is_file():
        return str(target)
    tmp = target.with_name(target.name + f".{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in TEST_DISTRIBUTIONS:
        dist = importlib.metadata.distribution(name)
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f)))
            if (f.parts and f.parts[0] in ("..", "")) or not src.is_file() or "__pycache__" in f.parts:
                continue
            dst = tmp / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    (tmp / ".complete").write_text("\n", encoding="utf-8")
    for p in [tmp, *tmp.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return str(target)


@dataclasses.dataclass(frozen=True)
class FactoryTask(Task):
    """A factory instance as a repo_env task: ``files`` the buggy repository, ``fix`` the
    pristine versions of the files the bug changed; ``checks`` name the hidden tests."""

    instance: Instance | None = None
    package: Package | None = None

    def statement(self) -> str:
        assert self.package is not None
        return (
            f"{self.prompt}\n\nThe repository is the source of the Python package {self.package.name} "
            f"{self.package.version} ({len(self.files)} files; import root {self.package.import_root!r}, tests in "
            f"{', '.join(self.package.tests)}, run with pytest). Fix the bug in the package's source; hidden copies "
            "of its tests grade the fix."
        )


class _LazyTasks(TaskSet):
    """The instances as tasks, each built when first asked for (its repository is the whole
    package tree)."""

    def __init__(self, instances: InstanceSet) -> None:
        self.instances = instances
        self._built: dict[str, FactoryTask] = {}
        if not len(instances):
            raise ValueError("no instances")

    def _task(self, inst: Instance) -> FactoryTask:
        if inst.id not in self._built:
            pkg = package_of(inst, self.instances)
            files, fix = repository(inst, pkg)
            checks = tuple(Check(t, "fail_to_pass", "", "passed") for t in inst.fail_to_pass) + tuple(
                Check(t, "pass_to_pass", "", "passed") for t in inst.pass_to_pass
            )
            self._built[inst.id] = FactoryTask(inst.id, inst.issue, files, fix, checks, inst.split, inst, pkg)
            if len(self._built) > 64:  # bounded: a long-running server does not keep every tree
                self._built.pop(next(iter(self._built)))
        return self._built[inst.id]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._task(x) for x in self.instances[i]]
        return self._task(self.instances[i])

    def __len__(self) -> int:
        return len(self.instances)

    def __iter__(self) -> Any:
        return (self._task(i) for i in self.instances)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i.split for i in self.instances))

    def by_id(self, task_id: str) -> Task:
        return self._task(self.instances.by_id(task_id))

    def sample(self, seed: int | None, split: str | None = None, tier: str | None = None) -> Task:
        pool = self.instances.select(split=split, tier=tier)
        if not pool:
            raise ValueError(f"no instance of split {split!r}, tier {tier!r}; splits: {', '.join(self.splits)}")
        return self._task(random.Random(seed).choice(pool))


@functools.lru_cache(maxsize=1)
def _shipped_tasks() -> _LazyTasks:
    """The shipped instances; only those of the packages in ``$REPO_FACTORY_PACKAGES``
    (comma-separated) when it is set (an image per package serves its own)."""
    insts = load_instances()
    only = {n.strip() for n in os.environ.get("REPO_FACTORY_PACKAGES", "").split(",") if n.strip()}
    if only:
        insts = InstanceSet([i for i in insts if i.package in only], insts.manifest)
    return _LazyTasks(insts)


class _TasksDescriptor:
    def __get__(self, obj: Any, owner: type) -> TaskSet:
        ts = owner.__dict__.get("_tasks")
        return ts if ts is not None else _shipped_tasks()


class FactoryEnvironment(RepoEnvironment):
    """Fix a planted bug in a real Python package; graded by its own tests, hidden (the shipped
    instances, or your own: ``class Mine(FactoryEnvironment): _tasks = factory_tasks(DIR)``)."""

    name = "repo_factory"
    version = "0.1.0"
    description = (
        "SWE-style tasks at scale: a real Python package (its sdist) with a procedurally planted bug, an issue "
        "written from the failing tests; read, search, edit, run pytest in a sandbox, submit; graded by the "
        "package's own tests, hidden."
    )
    max_episode_steps = 60
    max_sessions = 8
    max_files = 3000
    max_repo_bytes = 24 * 1024 * 1024
    grade_budget_s = 600.0
    limits: ClassVar[Limits] = Limits(
        wall_s=120.0, cpu_s=100, processes=32, output_bytes=32 * 1024, memory_bytes=1024 * 1024 * 1024,
        disk_bytes=160 * 1024 * 1024,
    )  # fmt: skip
    check_limits: ClassVar[Limits] = dataclasses.replace(limits, wall_s=180.0, cpu_s=150, output_bytes=4096)
    tasks: ClassVar[TaskSet] = _TasksDescriptor()  # type: ignore[assignment]
    _tasks: ClassVar[TaskSet | None] = None
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "kind": "swe",
        "documentation_url": "docs/tasks-factory.md",
    }
    task_splits: ClassVar[dict[str, str]] = {
        "train": "instances of the train packages",
        "validation": "instances of the validation packages",
        "test": "instances of the test packages (no package of it in another split)",
    }

    @classmethod
    def new_sandbox(cls) -> Sandbox:
        deps = testdeps()
        box = Sandbox(cls.limits, secrets=cls.secrets(), readable=[deps])
        box.env = {**box.env, "REPO_FACTORY_TESTDEPS": deps, "PYTHONPATH": deps}
        return box

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        ts = cls.tasks
        insts = ts.instances if isinstance(ts, _LazyTasks) else None
        if insts is None:
            return super().list_tasks(split)
        return [
            openenv.TaskInfo(i.id, split, {"package": i.package, "tier": i.tier, "fail_to_pass": len(i.fail_to_pass)})
            for i in insts
            if i.split == split
        ]

    def _pick(self, seed: Any, options: Mapping[str, Any]) -> Task:
        ts = self.tasks
        try:
            if options.get("task_id") is not None:
                return ts.by_id(str(options["task_id"]))
            if isinstance(ts, _LazyTasks):
                return ts.sample(None if seed is None else int(seed), options.get("split"), options.get("tier"))
            return ts.sample(None if seed is None else int(seed), options.get("split"))
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def _start(self, task: Task, feedback: str | None = None) -> None:
        super()._start(task, feedback)
        pkg = getattr(task, "package", None)
        if pkg is not None:
            root = "/workspace" if pkg.import_root in ("", ".") else f"/workspace/{pkg.import_root}"
            self.sandbox.env = {**self.sandbox.env, "PYTHONPATH": f"{root}:{self.sandbox.env['REPO_FACTORY_TESTDEPS']}"}

    @openenv.tool(timeout_s=300.0)
    def run_tests(self, tests: str = "") -> dict[str, Any]:
        """Run the package's tests with pytest in the sandbox, on your files.

        Args:
            tests: what to run, as pytest takes it (space-separated paths or node ids, e.g.
                "tests/test_core.py::test_parse"); default: the package's whole suite.
        """
        task = self.task
        assert isinstance(task, FactoryTask) and task.package is not None
        targets = tests.split() if tests.strip() else list(task.package.tests)
        for t in targets:
            if t.startswith(("-", "/")) or ".." in t.split("::")[0].split("/"):
                raise ValueError(f"give test paths or node ids, not {t!r}")
        root = "/workspace" if task.package.import_root in ("", ".") else f"/workspace/{task.package.import_root}"
        code = (
            "import os, sys\n"
            "sys.path.insert(0, os.environ['REPO_FACTORY_TESTDEPS'])\n"
            f"sys.path.insert(0, {root!r})\n"
            "import pytest\n"
            f"sys.exit(pytest.main(['-p', 'no:cacheprovider', '-o', 'addopts=', '-q', '-x', *{targets!r}]))\n"
        )
        self._exec(self._materialize)
        r: RunResult = self._exec(self.sandbox.run, code)
        return {**self._result(r), "passed": r.exit_code == 0 and not r.timed_out}

    def grade(self, files: Mapping[str, str]) -> Verdict:
        task = self.task
        if not isinstance(task, FactoryTask) or task.instance is None or task.package is None:
            return super().grade(files)
        inst, pkg, box = task.instance, task.package, self.sandbox
        pristine = {**task.files, **task.fix}
        diff = git_diff(task.files, files)
        graded, changed = graded_files(pkg, pristine, files)
        passed = {c.name: False for c in task.checks}
        error = None
        if tampering(pristine, changed):
            error = "the fix reaches for the test machinery: " + ", ".join(tampering(pristine, changed))[:300]
        else:
            copy = clean_copy(WorkspaceFiles({p: t.encode() for p, t in graded.items()}))
            groups = [[t] for t in inst.fail_to_pass] + ([list(inst.pass_to_pass)] if inst.pass_to_pass else [])
            random.SystemRandom().shuffle(groups)  # a fresh order per submission (RFC 0015)
            deadline = time.monotonic() + self.grade_budget_s
            with self._verifier_env(box):
                try:
                    for group in groups:
                        if time.monotonic() >= deadline:
                            break
                        paths = sorted({t.split("::", 1)[0] for t in group})
                        try:
                            box.clear()
                            put_files(box, copy.files, modes=copy.modes, dirs=copy.dirs)
                            r = box.call_function(FACTORY_GRADER, "check", [[group, pkg.import_root, paths]],
                                                  limits=self.check_limits)  # fmt: skip
                        except SandboxError as e:
                            error = error or str(e)[:300]
                            continue
                        for t, ok in _outcomes(group, r).items():
                            passed[t] = ok
                finally:
                    box.clear()

        def count(kind: str) -> tuple[int, int]:
            mine = [passed[c.name] for c in task.checks if c.kind == kind]
            return sum(mine), len(mine)

        return Verdict(dict(passed), count("fail_to_pass"), count("pass_to_pass"), diff, error)

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """For the certifier's ``grading`` level: on four instances of different packages (the
        shipped test split first), the reference fix (the pristine files through ``write_file``,
        then ``submit``: 1), the null (the buggy repository submitted: 0), and another
        instance's fix replayed (0)."""
        ts = cls.tasks
        if not isinstance(ts, _LazyTasks):
            return super().grading_probes()
        picked = ts.instances.sample(4, seed=0, split="test") or ts.instances.sample(4, seed=0)
        probes = []
        for i, inst in enumerate(picked):
            task = ts.by_id(inst.id)
            other = ts.by_id(picked[(i + 1) % len(picked)].id)
            replay = (
                [[*_writes(other.fix), _SUBMIT]] if other.id != task.id and other.fix.keys() != task.fix.keys() else []
            )
            probes.append(
                openenv.GradingProbe(
                    task_id=task.id, reference=[*_writes(task.fix), _SUBMIT], null=[[_SUBMIT]], replay=replay
                )
            )
        return probes


def _outcomes(group: list[str], r: FunctionResult) -> dict[str, bool]:
    """Each test of the group: passed only when the call ran to completion and answered
    ``"passed"`` for it (raw values compared here, in the server)."""
    ok = not (r.load_error is not None or r.timed_out or r.killed is not None or r.exit_code != 0)
    got = r.cases[0] if ok and len(r.cases) == 1 else None
    value = got.value if got is not None and got.answered and got.error is None else None
    if not isinstance(value, dict):
        return {t: False for t in group}
    return {t: value.get(t) == "passed" and type(value.get(t)) is str for t in group}


def factory_tasks(directory: str | os.PathLike[str]) -> TaskSet:
    """The instances built into ``directory`` (``openenv factory build --out DIR``), as tasks."""
    return _LazyTasks(load_instances(directory))
