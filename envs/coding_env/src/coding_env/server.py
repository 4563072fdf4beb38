"""The coding environment: write a Python function, graded by hidden unit tests.

Every step is a tool call (:class:`openenv.CallToolAction`):

* ``get_problem()``: the statement with example calls;
* ``run_python(code)``: runs a script; stdout, stderr, exit code, time, timed_out, and which
  sandbox limit the run met (``limit``: memory, time, cpu, processes; null: none);
* ``run_tests(code)``: the public examples, each with the expected and the actual value;
* ``submit(code)``: runs the hidden tests and ends the episode (terminated).

Code runs in the session's :class:`openenv.sandbox.Sandbox` (its workspace's files persist
within an episode; every call's processes and temporary files end with the call). ``submit``
grades there too, in a fresh process, with the hidden cases in a fresh random order, and empties
the workspace after, so nothing the graded run saw or wrote reaches a later call; reset empties
it too. The reward is :mod:`coding_env.rubric`: all or nothing unless :attr:`partial_credit`.

``submit`` is a grading tool (RFC 0015, :attr:`CodingEnvironment.grading`): in a strict episode
(the default) its result is the reward alone, and it cannot be called as a side call; in a rich
one (``reset(options={"feedback": "rich"})``) it returns the number of hidden cases passed, the
load error (raised before any hidden case is sent) and whether the run timed out.
``reset(seed=...)`` picks the task deterministically; ``options={"task_id": ...}`` (or
``"problem_id"``) or ``{"split": "train"|"test"}`` narrow it.

The tasks are :data:`coding_env.problems.PROBLEMS`, those of ``$CODING_ENV_TASKS`` (a task file,
:func:`coding_env.tasks.load_tasks`) when set, or a subclass's: :meth:`CodingEnvironment.with_tasks`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import openenv
from coding_env.problems import PROBLEMS
from coding_env.rubric import build_rubric
from coding_env.tasks import Task, TaskSet, load_tasks
from openenv.sandbox import FunctionResult, Limits, RunResult, Sandbox, SandboxError, SandboxUnavailable

MAX_STEPS = 20
MAX_CODE_CHARS = 50_000
TASKS_ENV = "CODING_ENV_TASKS"
INSTRUCTIONS = (
    "Tools: run_python(code) runs a script; run_tests(code) checks your function on the examples; "
    "submit(code) grades it on hidden tests and ends the episode."
)
_PACKAGE_DIR = str(Path(__file__).resolve().parent)
#: The order of the hidden cases of each submission: the operating system's randomness, never a
#: seed or anything else the agent sees or chooses (RFC 0015, "fresh every time").
_ORDER = random.SystemRandom()
#: The probes' problems (grading_probes): a list of strings, a boolean, a dict, floats, two arguments.
_PROBES = ("fizzbuzz", "is_prime", "word_count", "mean_median", "two_sum")


def _sandboxed(*, grades: bool = False, output: str | None = "stdout") -> dict[str, Any]:
    """The tool annotation that declares a tool running submitted code (RFC 0010)."""
    spec: dict[str, Any] = {"language": "python", "argument": "code"}
    if output:
        spec["output"] = output
    if grades:
        spec["grades"] = True
    return {"openenv/sandbox": spec}


@dataclasses.dataclass
class Submission:
    """The verdict of a ``submit``, kept by the environment for its rubric (never served but
    through the reward, and in rich episodes the tool's own result)."""

    code: str
    passed: int
    total: int
    time_s: float
    load_error: str | None
    timed_out_loading: bool


def _default_tasks() -> TaskSet:
    path = os.environ.get(TASKS_ENV, "").strip()
    return load_tasks(path) if path else PROBLEMS


class CodingEnvironment(openenv.Environment):
    """Python problems graded by hidden unit tests, with code run in a sandbox."""

    name = "coding_env"
    version = "0.1.0"
    description = (
        "Write a Python function; run code and example tests in a sandbox (private view of the machine, no "
        "network, bounded time, memory, processes and disk); graded by hidden unit tests."
    )
    # Seeds pick the task on every machine, but tool results carry measured run times:
    # trajectories are not bit-for-bit repeatable, so the environment does not claim it.
    deterministic = False
    max_episode_steps = MAX_STEPS
    max_sessions = 16
    #: Partial credit (an opt-in for curricula; farmable, never the default): the reward is the
    #: fraction of hidden tests passed less length and time penalties (:mod:`coding_env.rubric`).
    #: A subclass that sets it gets the matching :attr:`rubric` and :attr:`reward_range`;
    #: :meth:`with_tasks` takes it too. Default: all or nothing.
    partial_credit: ClassVar[bool] = False
    rubric = build_rubric()
    reward_range = (rubric.minimum, rubric.maximum)
    # RFC 0015: submit grades (its RFC 0010 annotation says so). Strict by default; rich (the pass
    # counts) on request at reset. The public metadata keys come from the task's identity and the
    # step counter, never from the hidden cases or the verdict.
    grading = openenv.Grading(
        feedback="strict",
        offers=("strict", "rich"),
        public_metadata=("problem_id", "split", "entry_point", "steps"),
    )
    example_actions = (
        openenv.CallToolAction("run_python", {"code": "print(1 + 1)"}),
        openenv.CallToolAction("run_tests", {"code": "def f(x):\n    return x\n"}),
        openenv.CallToolAction("submit", {"code": "def f(x):\n    return x\n"}),
    )
    limits: ClassVar[Limits] = Limits()
    #: The tasks (:class:`coding_env.tasks.TaskSet`); see :meth:`with_tasks`.
    tasks: ClassVar[TaskSet] = _default_tasks()
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "documentation_url": "envs/coding_env/README.md",
        "tasks": len(tasks),
    }
    task_splits: ClassVar[dict[str, str]] = {s: f"the {s} tasks" for s in tasks.splits}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The advertised rubric is the one served: a subclass choosing partial credit gets its tree
        # (unless it brings its own rubric).
        if "partial_credit" in cls.__dict__ and "rubric" not in cls.__dict__:
            cls.rubric = build_rubric(partial_credit=cls.partial_credit)
            if "reward_range" not in cls.__dict__:
                cls.reward_range = (cls.rubric.minimum, cls.rubric.maximum)

    @classmethod
    def with_tasks(
        cls,
        tasks: TaskSet | Iterable[Task] | str | os.PathLike[str],
        *,
        name: str | None = None,
        partial_credit: bool | None = None,
    ) -> type[CodingEnvironment]:
        """A subclass serving ``tasks``: a :class:`TaskSet`, tasks, or a task file's path;
        ``partial_credit=True`` opts into partial credit (:attr:`partial_credit`).

        Every expected value is computed (and every task checked) here, so a bad task fails
        when the class is made, not in an episode."""
        if isinstance(tasks, (str, os.PathLike)):
            taskset = load_tasks(tasks)
        elif isinstance(tasks, TaskSet):
            taskset = tasks
        else:
            taskset = TaskSet(tasks)
        taskset.check()
        attrs = {
            "tasks": taskset,
            "metadata": {**cls.metadata, "tasks": len(taskset)},
            "task_splits": {s: f"the {s} tasks" for s in taskset.splits},
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.with_tasks",
        }
        if name:
            attrs["name"] = name
        if partial_credit is not None:
            attrs["partial_credit"] = bool(partial_credit)
        return type(f"{cls.__name__}WithTasks", (cls,), attrs)

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """Problems of several kinds with their reference solutions, which earn 1.0, and two null
        solutions, which earn 0: an empty submission and a function returning None (RFC 0015).

        The shipped problems of :data:`_PROBES` served here, else the first three tasks with a
        reference solution. No ``replay``: a problem's hidden cases are fixed (the seed picks the
        problem, not its contents), so another seed's answer is another problem's."""
        ids = {t.id for t in cls.tasks}
        picked = [cls.tasks.by_id(i) for i in _PROBES if i in ids]
        if not picked:
            picked = [t for t in cls.tasks if t.reference is not None][:3]
        return [
            openenv.GradingProbe(
                task_id=t.id,
                reference=[openenv.CallToolAction("submit", {"code": t.reference})] if t.reference else None,
                null=[
                    [openenv.CallToolAction("submit", {"code": ""})],
                    [openenv.CallToolAction("submit", {"code": f"def {t.entry_point}(*args):\n    return None\n"})],
                ],
            )
            for t in picked
        ]

    @classmethod
    def secrets(cls) -> list[str]:
        """What submitted code must never see: this package (the shipped tasks and their
        references) and the task files."""
        return [_PACKAGE_DIR, *cls.tasks.sources]

    @classmethod
    def new_sandbox(cls) -> Sandbox:
        """A session's sandbox: :attr:`limits`, every required layer, :meth:`secrets` checked
        invisible. Override to change its limits, layers or view (the start-up check uses it
        too)."""
        return Sandbox(cls.limits, secrets=cls.secrets())

    @classmethod
    def preflight(cls) -> None:
        """Refuse to serve where code cannot be confined as required (before any session)."""
        try:
            with cls.new_sandbox() as box:
                r = box.run("pass")
        except SandboxUnavailable as e:
            raise RuntimeError(f"{cls.__name__} cannot run submitted code safely on this machine: {e}") from None
        if r.exit_code != 0:
            raise RuntimeError(f"{cls.__name__}: an empty program failed in the sandbox: {r.stderr[-500:]}")

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [openenv.TaskInfo(t.id, split, {"entry_point": t.entry_point}) for t in cls.tasks if t.split == split]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = self.new_sandbox()
        self._start(self._pick(options.get("seed"), options))

    def _pick(self, seed: Any, options: Mapping[str, Any]) -> Task:
        try:
            for key in ("task_id", "problem_id"):
                if options.get(key) is not None:
                    return self.tasks.by_id(str(options[key]))
            return self.tasks.sample(None if seed is None else int(seed), options.get("split"))
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def _start(self, task: Task) -> None:
        self.problem = task
        self.steps = 0
        self.submission: Submission | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(self._pick(seed, options or {}))
        self._exec(self.sandbox.clear)  # a new episode starts with an empty workspace
        text = f"{self.problem.statement()}\n\n{INSTRUCTIONS}"
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(
            obs,
            metadata={
                "problem_id": self.problem.id,
                "split": self.problem.split,
                "entry_point": self.problem.entry_point,
            },
        )

    def close(self) -> None:
        self.sandbox.close()

    @staticmethod
    def _exec(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except SandboxUnavailable as e:
            raise RuntimeError(f"the sandbox cannot run code safely on this machine: {e}") from None

    @staticmethod
    def _check(code: str) -> None:
        if len(code) > MAX_CODE_CHARS:
            raise ValueError(f"code is limited to {MAX_CODE_CHARS} characters")

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_problem(self) -> str:
        """The problem statement, with example calls."""
        return self.problem.statement()

    @openenv.tool(timeout_s=60.0, annotations=_sandboxed())
    def run_python(self, code: str) -> dict[str, Any]:
        """Run a Python script in the sandbox. The result says which limit ended or hampered
        the run, if any: ``limit`` is "memory", "time", "cpu" or "processes" (null: none),
        with ``limit_note`` saying what happened.

        Args:
            code: the script; its stdout and stderr are returned (each at most 64 KiB).
        """
        self._check(code)
        r: RunResult = self._exec(self.sandbox.run, code)
        return r.to_dict()

    @openenv.tool(timeout_s=60.0, annotations=_sandboxed())
    def run_tests(self, code: str) -> dict[str, Any]:
        """Check a solution on the public examples.

        Args:
            code: Python source defining the function the problem names.
        """
        self._check(code)
        task = self.problem
        cases = task.public
        r: FunctionResult = self._exec(self.sandbox.call_function, code, task.entry_point, [c.args for c in cases])
        ok = task.grade(cases, r.cases)
        return {
            "passed": sum(ok),
            "total": len(cases),
            "load_error": r.load_error,
            "timed_out": r.timed_out,
            "limit": r.limit,  # which sandbox limit the run met (RunResult.to_dict), null: none
            "stdout": r.stdout,
            "stderr": r.stderr,
            "cases": [
                {
                    "args": list(c.args),
                    "expected": task.expected(c),
                    "got": got.value,
                    "error": got.error,
                    "passed": ok[i],
                }
                for i, (c, got) in enumerate(zip(cases, r.cases, strict=True))
            ],
        }

    @openenv.tool(timeout_s=60.0, annotations=_sandboxed(grades=True, output=None))
    def submit(self, code: str) -> dict[str, Any]:
        """Grade a solution on the hidden tests; this ends the episode. With strict feedback (the
        default) the result is the reward; with rich feedback the hidden tests passed.

        Args:
            code: Python source defining the function the problem names.
        """
        self._check(code)
        task = self.problem
        # The hidden cases in a fresh order for every submission (RFC 0015): a table of answers
        # keyed on how many times the function was called, learnt in earlier episodes, matches
        # them only by chance.
        cases = _ORDER.sample(task.hidden, len(task.hidden))
        # In the session's sandbox, a call like any other: the sandbox's supervisor forks a new
        # process for every call and the code is loaded there, so each submission runs in a fresh
        # interpreter (nothing an earlier call or submission defined, imported or counted is in
        # it), and its processes, /tmp and /dev/shm end with it. Its output is not returned; then
        # the workspace is emptied, so nothing the graded run saw or wrote is there for a later
        # call (a side call after the episode, the next episode).
        try:
            r: FunctionResult = self._exec(self.sandbox.call_function, code, task.entry_point, [c.args for c in cases])
        except SandboxError:
            # The sandbox failed while grading: the run did not complete, so no verdict counts and
            # the submission earns the lowest reward (RFC 0015); the episode ends as for any other.
            self.submission = Submission(code, 0, len(cases), 0.0, "the sandbox failed while grading", False)
            return {"passed": 0, "total": len(cases), "load_error": self.submission.load_error, "timed_out": False}
        finally:
            self._exec(self.sandbox.clear)
        passed = sum(task.grade(cases, r.cases))
        self.submission = Submission(
            code,
            passed,
            len(cases),
            r.time_s,
            r.load_error,
            r.timed_out and not any(c.answered for c in r.cases) and r.load_error is None,
        )
        return {"passed": passed, "total": len(cases), "load_error": r.load_error, "timed_out": r.timed_out}

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        self.steps += 1
        ok = observation.result is not None and not observation.result.is_error
        return openenv.StepResult(
            observation, terminated=action.tool_name == "submit" and ok, metadata={"steps": self.steps}
        )

    def state(self) -> dict[str, Any]:
        # Nothing of a verdict (passed, timed out, run time, load error): in a strict episode two
        # submissions with the same reward must leave the same state (RFC 0015).
        return {
            "problem_id": self.problem.id,
            "split": self.problem.split,
            "steps": self.steps,
            "submitted": self.submission is not None,
            "isolation": list(self.sandbox.isolation),
        }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the coding environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(CodingEnvironment, ns.host, ns.port, ready=lambda s: print(f"coding_env serving on {s.address}"))


if __name__ == "__main__":
    main()
