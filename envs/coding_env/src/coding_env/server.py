"""The coding environment: write a Python function, graded by hidden unit tests.

Every step is a tool call (:class:`openenv.CallToolAction`):

* ``get_problem()``: the statement with example calls;
* ``run_python(code)``: runs a script; stdout, stderr, exit code, time, timed_out;
* ``run_tests(code)``: the public examples, each with the expected and the actual value;
* ``submit(code)``: runs the hidden tests and ends the episode (terminated).

All code runs in :class:`coding_env.sandbox.Sandbox`: a fresh confined process per call, in
the session's private directory (files persist between calls of one episode). The reward is
:mod:`coding_env.rubric`. ``reset(seed=...)`` picks the problem deterministically;
``options={"problem_id": ...}`` or ``{"split": "train"|"test"}`` narrow it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import openenv
from coding_env.problems import PROBLEMS, Problem, by_id, grade, sample
from coding_env.rubric import build_rubric
from coding_env.sandbox import Limits, RunResult, Sandbox, SandboxUnavailable

MAX_STEPS = 20
MAX_CODE_CHARS = 50_000
INSTRUCTIONS = (
    "Tools: run_python(code) runs a script; run_tests(code) checks your function on the examples; "
    "submit(code) grades it on hidden tests and ends the episode."
)


@dataclasses.dataclass
class Submission:
    code: str
    passed: int
    total: int
    time_s: float
    load_error: str | None
    timed_out_loading: bool


class CodingEnvironment(openenv.Environment):
    """Python problems graded by hidden unit tests, with code run in a confined sandbox."""

    name = "coding_env"
    version = "0.1.0"
    description = (
        "Write a Python function; run code and example tests in a sandbox (no network, limited "
        "CPU/memory/files/processes, private directory); graded by hidden unit tests."
    )
    # Seeds pick the problem on every machine, but tool results carry measured run times:
    # trajectories are not bit-for-bit repeatable, so the environment does not claim it.
    deterministic = False
    max_episode_steps = MAX_STEPS
    max_sessions = 16
    rubric = build_rubric()
    reward_range = (rubric.minimum, rubric.maximum)
    example_actions = (
        openenv.CallToolAction("run_python", {"code": "print(1 + 1)"}),
        openenv.CallToolAction("run_tests", {"code": "def f(x):\n    return x\n"}),
        openenv.CallToolAction("submit", {"code": "def f(x):\n    return x\n"}),
    )
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "documentation_url": "envs/coding_env/README.md",
        "tasks": len(PROBLEMS),
    }
    limits: ClassVar[Limits] = Limits()
    # RFC 0004: the problems as tasks (id = problem id), so harness runs and trainers name a
    # task with reset(task_id="fizzbuzz") like any environment's.
    task_splits: ClassVar[dict[str, str]] = {
        "train": "the training problems",
        "test": "every fourth problem, held out",
    }

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [openenv.TaskInfo(p.id, split, {"entry_point": p.entry_point}) for p in PROBLEMS if p.split == split]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = Sandbox(self.limits)
        self._start(self._pick(options.get("seed"), options))

    @staticmethod
    def _pick(seed: Any, options: Mapping[str, Any]) -> Problem:
        try:
            for key in ("task_id", "problem_id"):
                if options.get(key) is not None:
                    return by_id(str(options[key]))
            return sample(None if seed is None else int(seed), options.get("split"))
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def _start(self, problem: Problem) -> None:
        self.problem = problem
        self.steps = 0
        self.submission: Submission | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(self._pick(seed, options or {}))
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

    def _exec(self, fn: Any, *args: Any) -> RunResult:
        try:
            result: RunResult = fn(*args)
        except SandboxUnavailable as e:
            raise RuntimeError(f"the sandbox cannot run code safely on this machine: {e}") from None
        return result

    @staticmethod
    def _check(code: str) -> None:
        if len(code) > MAX_CODE_CHARS:
            raise ValueError(f"code is limited to {MAX_CODE_CHARS} characters")

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_problem(self) -> str:
        """The problem statement, with example calls."""
        return self.problem.statement()

    @openenv.tool(timeout_s=60.0)
    def run_python(self, code: str) -> dict[str, Any]:
        """Run a Python script in the sandbox.

        Args:
            code: the script; its stdout and stderr are returned (each at most 64 KiB).
        """
        self._check(code)
        return self._exec(self.sandbox.run, code).to_dict()

    @openenv.tool(timeout_s=60.0)
    def run_tests(self, code: str) -> dict[str, Any]:
        """Check a solution on the public examples.

        Args:
            code: Python source defining the function the problem names.
        """
        self._check(code)
        cases = self.problem.public
        r = self._exec(self.sandbox.call_cases, code, self.problem.entry_point, cases)
        ok = grade(self.problem, cases, r.cases)
        got = {c["case"]: c for c in r.cases}
        return {
            "passed": sum(ok),
            "total": len(cases),
            "load_error": r.load_error,
            "timed_out": r.timed_out,
            "stdout": r.stdout,
            "stderr": r.stderr,
            "cases": [
                {
                    "args": list(args),
                    "expected": self.problem.expected(args),
                    "got": got.get(i, {}).get("value"),
                    "error": got.get(i, {}).get("error"),
                    "passed": ok[i],
                }
                for i, args in enumerate(cases)
            ],
        }

    @openenv.tool(timeout_s=60.0)
    def submit(self, code: str) -> dict[str, Any]:
        """Grade a solution on the hidden tests; this ends the episode.

        Args:
            code: Python source defining the function the problem names.
        """
        self._check(code)
        cases = self.problem.hidden
        r = self._exec(self.sandbox.call_cases, code, self.problem.entry_point, cases)
        passed = sum(grade(self.problem, cases, r.cases))
        self.submission = Submission(
            code, passed, len(cases), r.time_s, r.load_error, r.timed_out and not r.cases and r.load_error is None
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
