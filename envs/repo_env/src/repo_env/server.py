"""The repository environment (SWE-style): fix a bug in a tiny Python repository, graded by hidden tests.

Every step is a tool call (:class:`openenv.CallToolAction`):

* ``get_task()``: the issue; ``list_files()``; ``read_file(path, start_line, end_line)``;
  ``search(text, path)`` (a literal substring, line by line);
* ``edit(path, old, new)``: replaces the one occurrence of ``old`` (``old=""`` creates a
  file); ``write_file(path, content)``;
* ``run_tests()``: the repository's own (visible) tests, ``python -m unittest`` over ``tests/``;
* ``run_python(code)``: a script run in the repository (to reproduce the bug);
* ``diff()``: the changes so far, as a git-style unified diff;
* ``submit()``: grades the repository with the hidden checks and ends the episode (terminated).

A grading environment (RFC 0015): ``submit`` is its grading tool. By default an episode gets
**strict** feedback: ``submit``'s result is the reward alone, the breakdown its root, and the
metadata only ``task_id``, ``split`` and ``steps`` (the agent has its diff from ``diff()``).
Asked at reset (``options={"feedback": "rich"}``), an episode gets what curricula and
evaluations read: ``submit`` returns the pass counts and the diff, the step's metadata holds
``diff`` and ``checks`` (name -> passed), the breakdown the counts.

The repository lives in the server: only ``edit`` and ``write_file`` change it, so the graded
files are exactly what the diff shows. Every call that runs code (``run_tests``,
``run_python``, ``submit``) empties the session's sandbox workspace, copies the repository in
and runs there confined (:mod:`openenv.sandbox`); what the code writes is not kept. ``submit``
runs each hidden check alone, in a fresh confined process on a clean copy of the repository
(:data:`repo_env.tasks.GRADER`), in a fresh order: the check's code enters the sandbox, its
expected value never does (the server compares the raw values the check observed), and
neither the other checks, the reference fix nor this package is visible from inside. A check
whose process crashed, was killed or ran out of time fails, whatever it answered. Then the
workspace is emptied again.

Reward (:func:`build_rubric`): 1 when every hidden check passes, else 0. With
:attr:`RepoEnvironment.partial_credit` (an opt-in for curricula), 0 unless every
``pass_to_pass`` check passes, else the fraction of ``fail_to_pass`` checks that pass. The
untouched repository scores 0 and the reference fix 1 on every shipped task
(``tests/test_repo_env.py``, ``tests/test_grading_attacks.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import openenv
from openenv.rubrics import Gate, Score, leaf
from openenv.sandbox import (
    VERIFIER_ENV,
    FunctionResult,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    WorkspaceFiles,
    clean_copy,
    put_files,
    safe_relpath,
)
from repo_env.diff import git_diff
from repo_env.tasks import GRADER, TASKS, Check, Task, TaskSet, same_value

MAX_STEPS = 40
MAX_FILE_BYTES = 256 * 1024
MAX_REPO_BYTES = 2 * 1024 * 1024
MAX_FILES = 200
MAX_MATCHES = 100
MAX_READ_LINES = 400
#: Beyond this many seconds of grading, the checks not yet run fail without running (a
#: submission that hangs every check costs the server a bounded time).
GRADE_BUDGET_S = 150.0
TRUNCATED = "\n[output truncated]"
INSTRUCTIONS = (
    "Tools: list_files(), read_file(path, start_line, end_line), search(text, path), edit(path, old, new), "
    "write_file(path, content), run_tests() runs tests/, run_python(code), diff(), submit() grades your fix "
    "with hidden tests and ends the episode."
)
_PACKAGE_DIR = str(Path(__file__).resolve().parent)
_RUN_TESTS = (
    "import sys, unittest\n"
    "unittest.main(module=None, argv=['python -m unittest', 'discover', '-s', 'tests', '-t', 'tests', '-v'])\n"
)


@dataclasses.dataclass
class Verdict:
    """What ``submit`` found: ``results`` (check name -> passed), the passed and total counts
    of each kind, the diff graded, and the first error of the grading itself (the sandbox
    failing), if any."""

    results: dict[str, bool]
    fail_to_pass: tuple[int, int]
    pass_to_pass: tuple[int, int]
    diff: str
    error: str | None = None


def _verdict(env: Any, action: Any) -> Verdict | None:
    return env.verdict if getattr(action, "tool_name", None) == "submit" else None


@leaf(minimum=0, maximum=1)
def no_regressions(action: Any, observation: Any, env: Any) -> Score:
    """The fraction of pass_to_pass checks passing (1 when the task has none)."""
    v = _verdict(env, action)
    if v is None:
        return Score(0.0, reason="not a submission")
    passed, total = v.pass_to_pass
    return Score(passed / total if total else 1.0, reason=f"{passed}/{total} pass_to_pass checks")


@leaf(minimum=0, maximum=1)
def fixed(action: Any, observation: Any, env: Any) -> Score:
    """1 when every fail_to_pass check passes, else 0; with the environment's ``partial_credit``,
    the fraction passing."""
    v = _verdict(env, action)
    if v is None:
        return Score(0.0, reason="not a submission")
    passed, total = v.fail_to_pass
    reason = f"{passed}/{total} fail_to_pass checks"
    if getattr(env, "partial_credit", False):
        return Score(passed / total if total else 0.0, reason=reason)
    return Score(1.0 if total and passed == total else 0.0, reason=reason)


def build_rubric() -> Gate:
    return Gate(
        no_regressions,
        fixed,
        name="reward",
        description="1 when every hidden check passes, else 0 (with partial_credit: 0 on any regression, else the "
        "fraction of fail_to_pass checks passing).",
    )


def _numbered(text: str, start: int, end: int) -> str:
    lines = text.splitlines()
    end = min(end if end > 0 else len(lines), len(lines), start + MAX_READ_LINES - 1)
    body = "".join(f"{i:5d}\t{lines[i - 1]}\n" for i in range(start, end + 1))
    more = f"[lines {end + 1}-{len(lines)} not shown]\n" if end < len(lines) else ""
    return body + more


class RepoEnvironment(openenv.Environment):
    """Fix a bug in a small Python repository; graded by hidden tests run in a sandbox."""

    name = "repo_env"
    version = "0.1.0"
    description = (
        "SWE-style tasks: a small Python repository with a bug and failing tests; read, search, edit, run the "
        "tests in a sandbox and submit a diff, graded by hidden tests the agent cannot reach."
    )
    deterministic = False
    max_episode_steps = MAX_STEPS
    max_sessions = 16
    rubric = build_rubric()
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=("task_id", "split", "steps"))
    """RFC 0015: strict feedback by default (the reward alone); ``rich`` on request at reset (pass
    counts, per-check results, the diff in the metadata). Public metadata: what never derives
    from the hidden checks (the diff is the agent's own, but it differs between submissions:
    the agent reads it with ``diff()``)."""
    partial_credit: ClassVar[bool] = False
    """Opt-in (a subclass sets it): the old shaping, 0 on any regression, else the fraction of
    ``fail_to_pass`` checks passing. Farmable (a submission that fixes the easy half of a bug
    earns half), so for curricula, never the default for training; off, a submission earns 1
    only when every hidden check passes."""
    reward_range = (0.0, 1.0)
    example_actions = (
        openenv.CallToolAction("list_files", {}),
        openenv.CallToolAction("run_tests", {}),
        openenv.CallToolAction("run_python", {"code": "print(1 + 1)"}),
        openenv.CallToolAction("submit", {}),
    )
    limits: ClassVar[Limits] = Limits(
        wall_s=30.0, cpu_s=20, processes=32, output_bytes=16 * 1024, disk_bytes=32 * 1024 * 1024
    )
    check_limits: ClassVar[Limits] = dataclasses.replace(limits, wall_s=10.0, cpu_s=8, output_bytes=4096)
    """The limits of one hidden check's process (a check that hangs fails after ``wall_s``)."""
    tasks: ClassVar[TaskSet] = TASKS
    max_files: ClassVar[int] = MAX_FILES
    """The most files a repository may hold (what the agent writes counts)."""
    max_repo_bytes: ClassVar[int] = MAX_REPO_BYTES
    """The most bytes a repository may hold."""
    grade_budget_s: ClassVar[float] = GRADE_BUDGET_S
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "kind": "swe",
        "documentation_url": "envs/repo_env/README.md",
        "tasks": len(TASKS),
    }
    task_splits: ClassVar[dict[str, str]] = {s: f"the {s} tasks" for s in TASKS.splits}

    @classmethod
    def secrets(cls) -> list[str]:
        """What code in the sandbox must never see: this package (hidden checks, reference fixes)."""
        return [_PACKAGE_DIR]

    @classmethod
    def new_sandbox(cls) -> Sandbox:
        return Sandbox(cls.limits, secrets=cls.secrets())

    @classmethod
    def preflight(cls) -> None:
        try:
            with cls.new_sandbox() as box:
                r = box.run("pass")
        except SandboxUnavailable as e:
            raise RuntimeError(f"{cls.__name__} cannot run code safely on this machine: {e}") from None
        if r.exit_code != 0:
            raise RuntimeError(f"{cls.__name__}: an empty program failed in the sandbox: {r.stderr[-500:]}")

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [
            openenv.TaskInfo(t.id, split, {"files": len(t.files), "hidden_checks": len(t.checks)})
            for t in cls.tasks
            if t.split == split
        ]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = self.new_sandbox()
        self._start(self._pick(options.get("seed"), options))

    def _pick(self, seed: Any, options: Mapping[str, Any]) -> Task:
        try:
            if options.get("task_id") is not None:
                return self.tasks.by_id(str(options["task_id"]))
            return self.tasks.sample(None if seed is None else int(seed), options.get("split"))
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def _start(self, task: Task, feedback: str | None = None) -> None:
        self.task = task
        self.files: dict[str, str] = dict(task.files)
        self.steps = 0
        self.verdict: Verdict | None = None
        # The episode's feedback level (the runtime fills it in at reset); strict when the
        # environment is used without one.
        self.feedback = feedback if feedback in ("strict", "rich") else "strict"

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult[Any]:
        options = options or {}
        self._start(self._pick(seed, options), options.get("feedback"))
        self._exec(self.sandbox.clear)
        text = f"{self.task.statement()}\n\n{INSTRUCTIONS}"
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(obs, metadata={"task_id": self.task.id, "split": self.task.split})

    def close(self) -> None:
        self.sandbox.close()

    @staticmethod
    def _exec(fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except SandboxUnavailable as e:
            raise RuntimeError(f"the sandbox cannot run code safely on this machine: {e}") from None

    # -- the repository

    def _path(self, path: str, *, exists: bool = True) -> str:
        p = safe_relpath(path)
        if exists and p not in self.files:
            raise ValueError(f"no file {p!r} (list_files() shows the repository)")
        return p

    def _store(self, path: str, content: str) -> None:
        size = len(content.encode())
        if size > MAX_FILE_BYTES:
            raise ValueError(f"a file is limited to {MAX_FILE_BYTES} bytes")
        if path not in self.files and len(self.files) >= self.max_files:
            raise ValueError(f"the repository is limited to {self.max_files} files")
        total = sum(len(v.encode()) for k, v in self.files.items() if k != path) + size
        if total > self.max_repo_bytes:
            raise ValueError(f"the repository is limited to {self.max_repo_bytes} bytes")
        self.files[path] = content

    def _materialize(self) -> None:
        """The session's workspace holds exactly the repository's files."""
        self.sandbox.clear()
        put_files(self.sandbox, self.files)

    def _result(self, r: RunResult) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stdout": r.stdout,
            "stderr": r.stderr,
            "exit_code": r.exit_code,
            "timed_out": r.timed_out,
            "truncated": r.stdout.endswith(TRUNCATED) or r.stderr.endswith(TRUNCATED),
        }
        if r.timed_out:
            out["stderr"] += f"\n[timed out after {self.limits.wall_s:g} s: every process was killed]"
        return out

    # -- tools

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_task(self) -> str:
        """The issue to fix."""
        return f"{self.task.statement()}\n\n{INSTRUCTIONS}"

    @openenv.tool(annotations={"readOnlyHint": True})
    def list_files(self) -> list[str]:
        """The repository's files."""
        return sorted(self.files)

    @openenv.tool(annotations={"readOnlyHint": True})
    def read_file(self, path: str, start_line: int = 1, end_line: int = 0) -> str:
        """A file's lines, numbered (at most 400 at a time).

        Args:
            path: the file, relative to the repository's root.
            start_line: the first line to show (1-based).
            end_line: the last line to show (0: to the end).
        """
        p = self._path(path)
        return _numbered(self.files[p], max(1, int(start_line)), int(end_line))

    @openenv.tool(annotations={"readOnlyHint": True})
    def search(self, text: str, path: str = "") -> list[str]:
        """Lines containing a literal text, as "path:line: content" (at most 100).

        Args:
            text: the text to find (case-sensitive, not a pattern).
            path: a file or directory to search in (default: the whole repository).
        """
        if not text:
            raise ValueError("give a text to search for")
        prefix = "" if path in ("", ".", "/") else safe_relpath(path)
        hits = []
        for p in sorted(self.files):
            if prefix and not (p == prefix or p.startswith(prefix.rstrip("/") + "/")):
                continue
            for i, line in enumerate(self.files[p].splitlines(), 1):
                if text in line:
                    hits.append(f"{p}:{i}: {line[:300]}")
                    if len(hits) >= MAX_MATCHES:
                        return [*hits, f"[more than {MAX_MATCHES} matches: narrow the search]"]
        return hits

    @openenv.tool
    def edit(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of `old` in a file with `new` (old="" creates a new file holding `new`).

        Args:
            path: the file, relative to the repository's root.
            old: the exact text to replace; it must occur exactly once (include surrounding lines to make it unique).
            new: the replacement text.
        """
        if old == "":
            p = self._path(path, exists=False)
            if p in self.files:
                raise ValueError(f"{p!r} exists: give the text to replace in `old`")
            self._store(p, new)
            return f"created {p} ({len(new.splitlines())} lines)"
        p = self._path(path)
        content = self.files[p]
        n = content.count(old)
        if n != 1:
            raise ValueError(f"`old` occurs {n} times in {p}; it must occur exactly once")
        updated = content.replace(old, new, 1)
        self._store(p, updated)
        first = updated[: content.index(old)].count("\n") + 1
        last = first + new.count("\n")
        return f"edited {p}:\n" + _numbered(updated, max(1, first - 2), last + 2)

    @openenv.tool
    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file.

        Args:
            path: the file, relative to the repository's root.
            content: its whole text.
        """
        p = self._path(path, exists=False)
        self._store(p, content)
        return f"wrote {p} ({len(content.splitlines())} lines)"

    @openenv.tool(timeout_s=120.0)
    def run_tests(self) -> dict[str, Any]:
        """Run the repository's tests (python -m unittest discover -s tests) in the sandbox."""
        self._exec(self._materialize)
        r: RunResult = self._exec(self.sandbox.run, _RUN_TESTS)
        return {**self._result(r), "passed": r.exit_code == 0 and not r.timed_out}

    @openenv.tool(
        timeout_s=120.0, annotations={"openenv/sandbox": {"language": "python", "argument": "code", "output": "stdout"}}
    )
    def run_python(self, code: str) -> dict[str, Any]:
        """Run a Python script in the repository's root (its modules importable); files it writes are not kept.

        Args:
            code: the script.
        """
        if len(code) > 100_000:
            raise ValueError("a script is limited to 100,000 characters")
        self._exec(self._materialize)
        r: RunResult = self._exec(self.sandbox.run, code)
        return self._result(r)

    @openenv.tool(annotations={"readOnlyHint": True})
    def diff(self) -> str:
        """The changes made so far, as a unified diff (git's format)."""
        return git_diff(self.task.files, self.files) or "(no changes)"

    @openenv.tool(timeout_s=300.0, grades=True)
    def submit(self) -> dict[str, Any]:
        """Grade the repository with the hidden tests and end the episode. With strict feedback
        (the default) the result is the reward alone; with rich feedback, the pass counts of
        each kind of check and the diff graded."""
        self.verdict = self._exec(self.grade, self.files)
        v = self.verdict
        return {
            "fail_to_pass": {"passed": v.fail_to_pass[0], "total": v.fail_to_pass[1]},
            "pass_to_pass": {"passed": v.pass_to_pass[0], "total": v.pass_to_pass[1]},
            "diff": v.diff,
        }

    def grade(self, files: Mapping[str, str]) -> Verdict:
        """Run every hidden check on ``files``, each alone: a fresh order per submission, and per
        check the emptied workspace, a clean copy of the files (:func:`openenv.sandbox.clean_copy`)
        and one sandbox call of :data:`~repo_env.tasks.GRADER` with the verifier's environment
        (:data:`openenv.sandbox.VERIFIER_ENV`). A check passes only when its call ran to
        completion (exit status 0, not killed, not timed out) and the value it observed equals
        the expected one (:func:`~repo_env.tasks.same_value`, in the server). The workspace is
        emptied after."""
        task, box = self.task, self.sandbox
        diff = git_diff(task.files, files)
        copy = clean_copy(WorkspaceFiles({p: t.encode() for p, t in files.items()}))
        order = list(task.checks)
        random.SystemRandom().shuffle(order)  # a fresh order per submission (RFC 0015)
        passed: dict[str, bool] = {}
        error = None
        deadline = time.monotonic() + self.grade_budget_s
        with self._verifier_env(box):
            try:
                for c in order:
                    if time.monotonic() >= deadline:
                        passed[c.name] = False
                        continue
                    try:
                        box.clear()
                        put_files(box, copy.files, modes=copy.modes, dirs=copy.dirs)
                        r = box.call_function(GRADER, "check", [[c.code]], limits=self.check_limits)
                    except SandboxError as e:  # the check broke its sandbox: it fails, the next gets a new one
                        passed[c.name], error = False, error or str(e)[:300]
                        continue
                    passed[c.name] = _check_passed(c, r)
            finally:
                box.clear()

        def count(kind: str) -> tuple[int, int]:
            mine = [passed[c.name] for c in task.checks if c.kind == kind]
            return sum(mine), len(mine)

        return Verdict(
            {c.name: passed[c.name] for c in task.checks},
            count("fail_to_pass"),
            count("pass_to_pass"),
            diff,
            error,
        )

    @staticmethod
    @contextlib.contextmanager
    def _verifier_env(box: Sandbox) -> Iterator[None]:
        """The sandbox's calls run with :data:`~openenv.sandbox.VERIFIER_ENV` over its own
        environment while grading (no work tree on the path of any interpreter a check starts,
        no user site-packages), and with the agent's environment again after."""
        before = box.env
        box.env = {**before, **VERIFIER_ENV}
        try:
            yield
        finally:
            box.env = before

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult[Any]:
        self.steps += 1
        ok = observation.result is not None and not observation.result.is_error
        done = action.tool_name == "submit" and ok
        meta: dict[str, Any] = {"steps": self.steps}
        if done and self.verdict is not None:
            # Rich feedback only: in a strict episode the runtime keeps the public keys alone.
            meta["diff"] = self.verdict.diff
            meta["checks"] = dict(self.verdict.results)
        return openenv.StepResult(observation, terminated=done, metadata=meta)

    def state(self) -> dict[str, Any]:
        """The task, the step count, whether the repository was submitted and the sandbox's
        layers; in a rich episode also the files changed. Nothing of the verdict: in a strict
        episode two submissions are indistinguishable here (RFC 0015)."""
        st: dict[str, Any] = {
            "task_id": self.task.id,
            "split": self.task.split,
            "steps": self.steps,
            "submitted": self.verdict is not None,
            "isolation": list(self.sandbox.isolation),
        }
        if self.feedback == "rich":
            st["changed_files"] = sorted(
                p for p in set(self.files) | set(self.task.files) if self.files.get(p) != self.task.files.get(p)
            )
        return st

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """For the certifier's ``grading`` level (RFC 0015), on the four tasks issue 46 found
        paying 0.5 for the bug left in place: the reference fix (its files written with
        ``write_file``, then ``submit``) earns 1; submitting the untouched repository is the
        null (0); another task's reference fix, replayed here, earns no more."""
        known = {t.id for t in cls.tasks}
        issue_46 = ("bisect_bounds", "fahrenheit", "parse_duration", "roman_subtractive")
        ids: list[str] = [t for t in issue_46 if t in known]
        if not ids:  # a subclass with tasks of its own: its first four
            ids = [t.id for t in cls.tasks][:4]
        probes = []
        for i, task_id in enumerate(ids):
            task = cls.tasks.by_id(task_id)
            other = cls.tasks.by_id(ids[(i + 1) % len(ids)])
            probes.append(
                openenv.GradingProbe(
                    task_id=task.id,
                    reference=[*_writes(task.fix), _SUBMIT],
                    null=[[_SUBMIT]],
                    replay=[[*_writes(other.fix), _SUBMIT]] if other.id != task.id else [],
                )
            )
        return probes


_SUBMIT = openenv.CallToolAction("submit", {})


def _writes(files: Mapping[str, str]) -> list[openenv.CallToolAction]:
    return [openenv.CallToolAction("write_file", {"path": p, "content": text}) for p, text in sorted(files.items())]


def _check_passed(check: Check, r: FunctionResult) -> bool:
    """A check passes only when its process ran to completion (it loaded the grader, exited with
    status 0, was neither killed nor out of time) and answered a value equal to the expected one.
    What a crashed, killed or hung check answered before its end does not count."""
    if r.load_error is not None or r.timed_out or r.killed is not None or r.exit_code != 0:
        return False
    if len(r.cases) != 1:
        return False
    got = r.cases[0]
    return got.answered and got.error is None and same_value(got.value, check.expected)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the repository environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(RepoEnvironment, ns.host, ns.port, ready=lambda s: print(f"repo_env serving on {s.address}"))


if __name__ == "__main__":
    main()
