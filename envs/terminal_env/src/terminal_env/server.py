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

**Tasks** are families (:class:`terminal_env.tasks.TaskFamily`): the reset's seed (with the
``task_id`` option, or alone) picks the task and its instance, whose files, names and numbers,
and so the checks' expected values, are drawn from the seed; without a seed the instance is
random. An answer learnt in one episode is wrong in the next.

**Verification** (``submit``, a grading tool, RFC 0015): the workspace is read out of the
sandbox (regular files and directories only: links, FIFOs and devices are dropped), cleaned
(:func:`openenv.sandbox.clean_copy`: git configurations, hooks), the workspace emptied, that copy
put back, and the task's checks run by :data:`terminal_env.tasks.VERIFIER` in a fresh confined
call, in a fresh order (the verifier's code and the expected values never were in the
workspace; it takes the workspace off ``sys.path`` before importing anything, runs programs by
absolute path with a clean environment and ``--noprofile --norc`` in a Landlock domain of their
own, which cannot signal the verifier, and reads files without following links). The expected
values stay in the server; answers come back in lock step, each tagged with a nonce. The
verdict counts only when the verifier ran to completion (exit 0, not killed, not timed out,
every check answered): otherwise it pays 0. Then the workspace is emptied again.

**Reward**: 1.0 when every check passes, else 0 (:attr:`TerminalEnvironment.partial_credit`
opts into the fraction of checks passed, for curricula only: it pays for partial answers).
**Feedback** (:attr:`TerminalEnvironment.grading`): strict by default (``submit``'s result is
the reward and nothing else; the metadata keeps ``steps``, ``task_id`` and ``split``); a reset
with ``options={"feedback": "rich"}`` gets ``{passed, total}`` and the per-check verdicts in the
final step's metadata (``checks``).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import random
import shlex
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
    clean_copy,
    get_files,
    put_files,
)
from terminal_env.families import TASKS
from terminal_env.tasks import VERIFIER, Task, TaskFamily, TaskSet

MAX_STEPS = 50
MAX_COMMAND_CHARS = 20_000
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 120.0
VERIFY_TIMEOUT_S = 60.0
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
    """What the verifier concluded: checks passed of ``total``, each check's result (in the
    task's order), and why it did not conclude (``error``: then nothing passed)."""

    passed: int
    total: int
    results: list[bool]
    error: str | None = None


@leaf(minimum=0, maximum=1)
def checks_passed(action: Any, observation: Any, env: Any) -> Score:
    """On submit, 1 when the final workspace passes every check of the task, else 0 (or the
    fraction passed, with ``partial_credit``); 0 on other steps."""
    v = env.verdict if getattr(action, "tool_name", None) == "submit" else None
    if v is None or not v.total:
        return Score(0.0, reason="not a submission")
    score = v.passed / v.total if env.partial_credit else float(v.passed == v.total)
    return Score(score, reason=f"{v.passed}/{v.total} checks" + (f" ({v.error})" if v.error else ""))


def write_files_command(files: Mapping[str, str | bytes], modes: Mapping[str, int] | None = None) -> str:
    """A bash command line writing ``files`` (path -> content) into the workspace as they are,
    with their permission bits: how a policy writes an answer it memorised."""
    parts = []
    for path, content in sorted(files.items()):
        data = content.encode() if isinstance(content, str) else content
        q = shlex.quote(path)
        encoded = base64.b64encode(data).decode()
        parts.append(f'mkdir -p -- "$(dirname -- {q})" && printf %s {encoded} | base64 -d > {q}')
        parts.append(f"chmod {oct((modes or {}).get(path, 0o644))[2:]} -- {q}")
    return " && ".join(parts) or "true"


class TerminalEnvironment(openenv.Environment):
    """A shell in a sandbox; each task is verified by checks run after the agent."""

    name = "terminal_env"
    version = "0.1.0"
    description = (
        "Shell tasks in a sandbox: bash commands (the directory and exported variables persist between them, "
        "output capped, per-command timeouts, exit codes), verified after the agent by checks it cannot reach."
    )
    deterministic = False
    #: RFC 0015: strict feedback unless a reset asks for rich; metadata keys that never derive
    #: from the checks (the step counter, the task's id and split) pass in strict episodes.
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=("steps", "task_id", "split", "tier"))
    #: Opt-in partial credit: the reward is the fraction of checks passed instead of all or
    #: nothing. It pays for partial answers (a workspace that passes one check of two earns
    #: 0.5), so a policy can farm it: for curricula only, never for training a final policy.
    partial_credit: ClassVar[bool] = False
    #: Wall-clock seconds of the verifier's call; a verifier still running then pays 0.
    verify_timeout_s: ClassVar[float] = VERIFY_TIMEOUT_S
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
        "work": "agentic",
        "documentation_url": "envs/terminal_env/README.md",
        "baselines_url": "envs/terminal_env/README.md#baselines",
        "tasks": len(TASKS),
    }
    task_splits: ClassVar[dict[str, str]] = {
        s: f"the {s} task families ({sum(t.split == s for t in TASKS)})" for s in TASKS.splits
    }

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
        return [
            openenv.TaskInfo(t.id, split, {"checks": len(t.instance(0).checks), "varies": t.varies, "tier": t.tier})
            for t in cls.tasks
            if t.split == split
        ]

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """Per task, one seed (a different one for each task): the task's solution run through
        ``run`` then ``submit`` (the reference), ``submit`` of the untouched workspace (the null
        solution), and, for a task whose contents vary, the literal answer files of another
        seed's instance written through ``run``, then ``submit`` (the replay: 0)."""
        submit = openenv.CallToolAction("submit", {})
        probes = []
        for i, family in enumerate(cls.tasks):
            seed = 101 + 7 * i
            task = family.instance(seed)
            replay = []
            if family.varies:
                # the next seed whose instance has another answer (two seeds of one family
                # never share one: tests/test_task_families.py; a family of one's own may)
                other = next(t for s in range(seed + 1, seed + 100) if (t := family.instance(s)).answer != task.answer)
                memorised = write_files_command(other.answer, other.answer_modes)
                replay.append([openenv.CallToolAction("run", {"command": memorised}), submit])
            probes.append(
                openenv.GradingProbe(
                    task_id=family.id,
                    seed=seed,
                    reference=[openenv.CallToolAction("run", {"command": task.solution}), submit],
                    null=[[submit]],
                    replay=replay,
                )
            )
        return probes

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = self.new_sandbox()
        self.task = self._pick(options.get("seed"), options)
        self.feedback = "strict"
        self.steps = 0
        self.verdict: Verdict | None = None
        self._fresh = True  # the task's files are not in the workspace yet (see _workspace)

    def _pick(self, seed: Any, options: Mapping[str, Any]) -> Task:
        """The instance of the task the options name (or the seed picks, within the options'
        ``split`` and ``tier``) at ``seed`` (random without one)."""
        try:
            seed = None if seed is None else int(seed)
            family: Task | TaskFamily
            if options.get("task_id") is not None:
                family = self.tasks.by_id(str(options["task_id"]))
            else:
                tier = options.get("tier")
                family = self.tasks.sample(seed, options.get("split"), None if tier is None else str(tier))
            return family.instance(seed)
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult[Any]:
        self.task = self._pick(seed, options or {})
        self.feedback = str((options or {}).get("feedback") or "strict")
        self.steps = 0
        self.verdict = None
        self._fresh = True
        self._exec(self.sandbox.clear)  # a sandbox not started yet has nothing to clear
        text = f"{self.task.statement()}\n\n{INSTRUCTIONS}"
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(
            obs, metadata={"task_id": self.task.id, "split": self.task.split, "tier": self.task.tier}
        )

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

    @openenv.tool(timeout_s=300.0, grades=True)
    def submit(self) -> dict[str, Any]:
        """Check the workspace against the task and end the episode.

        Returns the reward only (strict feedback, the default); an episode reset with
        ``options={"feedback": "rich"}`` gets ``{passed, total}``.
        """
        self.verdict = self._exec(self.verify)
        return {"passed": self.verdict.passed, "total": self.verdict.total}

    def verify(self) -> Verdict:
        """Run the task's checks on a clean copy of the workspace's regular files and
        directories, in the emptied workspace, in a fresh order; empty it after. Nothing passes
        unless the verifier ran to completion."""
        task, box = self.task, self.sandbox
        n = len(task.checks)
        order = list(range(n))
        random.SystemRandom().shuffle(order)  # a fresh order per submission: no answer keyed on position
        try:
            self._workspace()
            files = clean_copy(get_files(box, exclude=[STATE_FILE]))
            box.clear()
            put_files(box, files.files, modes=files.modes, dirs=files.dirs)
            limits = dataclasses.replace(self.limits, wall_s=self.verify_timeout_s, output_bytes=4096)
            r = box.call_function(VERIFIER, "check", [[task.checks[i].code] for i in order], limits=limits)
        except (SandboxError, ValueError) as e:  # ValueError: a path put_files refuses
            return Verdict(0, n, [False] * n, str(e)[:300])
        finally:
            box.clear()
        # The verdict counts only when the verifier ran to completion: a call killed (by a
        # signal or a limit), timed out, or that did not answer every check pays nothing, whatever
        # it answered before.
        incomplete = (
            r.load_error
            or ("the verifier timed out" if r.timed_out else None)
            or (f"the verifier was killed ({r.killed})" if r.killed else None)
            or (f"the verifier ended with status {r.exit_code}" if r.exit_code != 0 else None)
            or (None if all(c.answered for c in r.cases) else "the verifier did not answer every check")
        )
        if incomplete:
            return Verdict(0, n, [False] * n, str(incomplete)[:300])
        ok = [False] * n
        for i, got in zip(order, r.cases, strict=True):
            ok[i] = got.error is None and got.value == task.checks[i].expected
        return Verdict(sum(ok), n, ok, None)

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult[Any]:
        self.steps += 1
        ok = observation.result is not None and not observation.result.is_error
        done = action.tool_name == "submit" and ok
        meta: dict[str, Any] = {"steps": self.steps}
        if done and self.verdict is not None and self.feedback == "rich":
            meta["checks"] = {c.name: p for c, p in zip(self.task.checks, self.verdict.results, strict=True)}
        return openenv.StepResult(observation, terminated=done, metadata=meta)

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id,
            "split": self.task.split,
            "tier": self.task.tier,
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
