"""The terminal environment: a shell session in a sandbox; tasks verified by checks after the agent.

Every step is a tool call (:class:`openenv.CallToolAction`):

* ``get_task()``: the instruction;
* ``run(command, timeout_s=30)``: runs a bash command line in the workspace; stdout, stderr
  (each cut at 16 KiB), exit code, timed_out;
* ``run_python(code)``: runs a Python script in ``/workspace``;
* ``submit()``: verifies the workspace and ends the episode (terminated).

**What persists between commands** (a session of one shell, built on the sandbox's calls:
nothing of a call outlives it): the workspace's files, the working directory and the exported
environment variables. Each command runs in a fresh ``bash`` in a fresh confined call; at its
end (``exit`` included) the shell writes its directory and ``export -p`` to
``/workspace/.shellstate``, which the next command's shell reads first. What does not persist:
background processes (every process of a command ends with it), shell variables that are not
exported, functions, aliases, shell options, ``/tmp``. A command that times out is killed
whole: exit code 124, ``timed_out`` true, and its changes to the directory and variables are
lost (its files stay). stdin is empty: a command waiting for input reads end of file.

**Verification** (``submit``): the workspace is read out of the sandbox (regular files and
directories only: links, FIFOs and devices are dropped), the workspace emptied, that copy put
back, and the task's checks run by :data:`terminal_env.tasks.VERIFIER` in a fresh confined call
(the verifier's code and the expected values never were in the workspace; it takes the
workspace off ``sys.path`` before importing anything, runs programs by absolute path with a
clean environment and ``--noprofile --norc``, and reads files without following links). The
expected values stay in the server; answers come back in lock step, each tagged with a nonce.
Then the workspace is emptied again. The reward is the fraction of checks passed.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import openenv
from openenv.rubrics import Score, leaf
from openenv.sandbox import (
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    get_files,
    put_files,
)
from terminal_env.tasks import TASKS, VERIFIER, Task, TaskSet

MAX_STEPS = 50
MAX_COMMAND_CHARS = 20_000
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 120.0
TIMEOUT_EXIT = 124
STATE_FILE = ".shellstate"
TRUNCATED = "\n[output truncated]"
INSTRUCTIONS = (
    "Tools: run(command) runs a bash command line in the workspace (the directory and exported variables carry "
    "over to the next command; background processes do not); run_python(code) runs a Python script; submit() "
    "checks the workspace and ends the episode."
)
_PACKAGE_DIR = str(Path(__file__).resolve().parent)

#: The shell around every command: restore the directory and exported variables, run the
#: command line (``$1``), and save them again on any exit (``exit N`` included), with builtins
#: only (no process of its own besides bash).
SHELL = (
    '__st=/workspace/.shellstate; if [ -f "$__st" ]; then . "$__st" >/dev/null 2>&1; fi; '
    "__save() { __rc=$?; export -n OLDPWD 2>/dev/null; "
    """{ export -p; printf 'cd -- %q\\n' "$PWD"; } > "$__st" 2>/dev/null; exit $__rc; }; """
    'trap __save EXIT; eval "$1"'
)  # one line: an error in the command says "bash: line N" of the command itself


def _sandboxed(language: str, argument: str, *, output: str | None = "stdout") -> dict[str, Any]:
    spec: dict[str, Any] = {"language": language, "argument": argument}
    if output:
        spec["output"] = output
    return {"openenv/sandbox": spec}


@dataclasses.dataclass
class Verdict:
    passed: int
    total: int
    results: list[bool]
    error: str | None = None


@leaf(minimum=0, maximum=1)
def checks_passed(action: Any, observation: Any, env: Any) -> Score:
    """The fraction of the task's checks the final workspace passes (on submit)."""
    v = env.verdict if getattr(action, "tool_name", None) == "submit" else None
    if v is None or not v.total:
        return Score(0.0, reason="not a submission")
    return Score(v.passed / v.total, reason=f"{v.passed}/{v.total} checks" + (f" ({v.error})" if v.error else ""))


class TerminalEnvironment(openenv.Environment):
    """A shell in a sandbox; each task is verified by checks run after the agent."""

    name = "terminal_env"
    version = "0.1.0"
    description = (
        "Shell tasks in a sandbox: bash commands (the directory and exported variables persist between them, "
        "output capped, per-command timeouts, exit codes), verified after the agent by checks it cannot reach."
    )
    deterministic = False
    max_episode_steps = MAX_STEPS
    max_sessions = 16
    rubric = checks_passed
    reward_range = (0.0, 1.0)
    example_actions = (
        openenv.CallToolAction("run", {"command": "ls -la && cd /tmp && pwd"}),
        openenv.CallToolAction("run_python", {"code": "print(1 + 1)"}),
        openenv.CallToolAction("submit", {}),
    )
    limits: ClassVar[Limits] = Limits(
        wall_s=DEFAULT_TIMEOUT_S, cpu_s=60, processes=32, output_bytes=16 * 1024, disk_bytes=64 * 1024 * 1024
    )
    tasks: ClassVar[TaskSet] = TASKS
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "kind": "terminal",
        "documentation_url": "envs/terminal_env/README.md",
        "tasks": len(TASKS),
    }
    task_splits: ClassVar[dict[str, str]] = {s: f"the {s} tasks" for s in TASKS.splits}

    @classmethod
    def secrets(cls) -> list[str]:
        """What the agent's commands must never see: this package (the checks and solutions)."""
        return [_PACKAGE_DIR]

    @classmethod
    def new_sandbox(cls) -> Sandbox:
        return Sandbox(cls.limits, secrets=cls.secrets())

    @classmethod
    def preflight(cls) -> None:
        try:
            with cls.new_sandbox() as box:
                r = box.exec(["/bin/bash", "--noprofile", "--norc", "-c", "true"])
        except SandboxUnavailable as e:
            raise RuntimeError(f"{cls.__name__} cannot run commands safely on this machine: {e}") from None
        if r.exit_code != 0:
            raise RuntimeError(f"{cls.__name__}: bash does not run in the sandbox: {r.stderr[-500:]}")

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [openenv.TaskInfo(t.id, split, {"checks": len(t.checks)}) for t in cls.tasks if t.split == split]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = self.new_sandbox()
        self.task = self._pick(options.get("seed"), options)
        self.steps = 0
        self.verdict: Verdict | None = None
        self._fresh = True  # the task's files are not in the workspace yet (see _workspace)

    def _pick(self, seed: Any, options: Mapping[str, Any]) -> Task:
        try:
            if options.get("task_id") is not None:
                return self.tasks.by_id(str(options["task_id"]))
            return self.tasks.sample(None if seed is None else int(seed), options.get("split"))
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult[Any]:
        self.task = self._pick(seed, options or {})
        self.steps = 0
        self.verdict = None
        self._fresh = True
        self._exec(self.sandbox.clear)  # a sandbox not started yet has nothing to clear
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
            raise RuntimeError(f"the sandbox cannot run commands safely on this machine: {e}") from None

    def _workspace(self) -> None:
        """The task's files, written when the episode first needs the workspace (a reset that
        runs no command starts no sandbox)."""
        if self._fresh:
            self._exec(self.sandbox.clear)
            self._exec(put_files, self.sandbox, dict(self.task.files), modes=self.task.modes, dirs=self.task.dirs)
            self._fresh = False

    @staticmethod
    def _result(r: RunResult, timeout_s: float) -> dict[str, Any]:
        truncated = r.stdout.endswith(TRUNCATED) or r.stderr.endswith(TRUNCATED)
        out: dict[str, Any] = {
            "stdout": r.stdout,
            "stderr": r.stderr,
            "exit_code": TIMEOUT_EXIT if r.timed_out else r.exit_code,
            "timed_out": r.timed_out,
            "truncated": truncated,
        }
        if r.timed_out:
            out["stderr"] += f"\n[timed out after {timeout_s:g} s: every process of the command was killed]"
        elif r.killed == "memory":
            out["stderr"] += "\n[killed: the command's processes exceeded the memory limit]"
        return out

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_task(self) -> str:
        """The task's instruction."""
        return f"{self.task.statement()}\n\n{INSTRUCTIONS}"

    @openenv.tool(timeout_s=MAX_TIMEOUT_S + 60, annotations=_sandboxed("shell", "command"))
    def run(self, command: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Run a bash command line in the workspace, as the next command of one shell session.

        The working directory and exported variables carry over to the next command;
        background processes end with the command. stdout and stderr are each cut at 16 KiB
        (then "[output truncated]" is appended and `truncated` is true). A command still running
        after timeout_s is killed: exit_code 124, timed_out true.

        Args:
            command: the command line (bash; pipes, &&, heredocs, cd, export all work).
            timeout_s: seconds before the command is killed (1 to 120, default 30).
        """
        if len(command) > MAX_COMMAND_CHARS:
            raise ValueError(f"a command is limited to {MAX_COMMAND_CHARS} characters")
        t = min(max(float(timeout_s), 1.0), MAX_TIMEOUT_S)
        limits = dataclasses.replace(self.limits, wall_s=t)
        argv = ["/bin/bash", "--noprofile", "--norc", "-c", SHELL, "bash", command]
        self._workspace()
        r: RunResult = self._exec(self.sandbox.exec, argv, limits=limits)
        return self._result(r, t)

    @openenv.tool(timeout_s=MAX_TIMEOUT_S + 60, annotations=_sandboxed("python", "code"))
    def run_python(self, code: str) -> dict[str, Any]:
        """Run a Python script in /workspace (stdout and stderr each cut at 16 KiB; 30 s).

        Args:
            code: the script.
        """
        if len(code) > MAX_COMMAND_CHARS * 5:
            raise ValueError(f"a script is limited to {MAX_COMMAND_CHARS * 5} characters")
        self._workspace()
        r: RunResult = self._exec(self.sandbox.run, code)
        return self._result(r, self.limits.wall_s)

    @openenv.tool(timeout_s=300.0)
    def submit(self) -> dict[str, Any]:
        """Check the workspace against the task and end the episode."""
        self.verdict = self._exec(self.verify)
        return {"passed": self.verdict.passed, "total": self.verdict.total}

    def verify(self) -> Verdict:
        """Run the task's checks on a copy of the workspace's regular files and directories, in
        the emptied workspace; empty it after."""
        task, box = self.task, self.sandbox
        try:
            self._workspace()
            files = get_files(box, exclude=[STATE_FILE])
            box.clear()
            put_files(box, files.files, modes=files.modes, dirs=files.dirs)
            limits = dataclasses.replace(self.limits, wall_s=60.0, output_bytes=4096)
            r = box.call_function(VERIFIER, "check", [[c.code] for c in task.checks], limits=limits)
        except SandboxError as e:
            return Verdict(0, len(task.checks), [False] * len(task.checks), str(e)[:300])
        finally:
            box.clear()
        ok = [
            got.answered and got.error is None and got.value == c.expected
            for c, got in zip(task.checks, r.cases, strict=True)
        ]
        return Verdict(sum(ok), len(ok), ok, r.load_error)

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult[Any]:
        self.steps += 1
        ok = observation.result is not None and not observation.result.is_error
        done = action.tool_name == "submit" and ok
        meta: dict[str, Any] = {"steps": self.steps}
        if done and self.verdict is not None:
            meta["checks"] = {c.name: p for c, p in zip(self.task.checks, self.verdict.results, strict=True)}
        return openenv.StepResult(observation, terminated=done, metadata=meta)

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id,
            "split": self.task.split,
            "steps": self.steps,
            "submitted": self.verdict is not None,
            "isolation": list(self.sandbox.isolation),
        }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the terminal environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(TerminalEnvironment, ns.host, ns.port, ready=lambda s: print(f"terminal_env serving on {s.address}"))


if __name__ == "__main__":
    main()
