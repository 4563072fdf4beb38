"""Harbor tasks as an openenv environment: the agent works in the task's environment, the task's
own tests grade it.

Every step is a tool call (:class:`openenv.CallToolAction`):

* ``shell(command)``: ``bash -c COMMAND`` in the task's working directory (``/app`` unless its
  Dockerfile says otherwise); stdout, stderr, exit code;
* ``read_file(path)``, ``write_file(path, content)``, ``edit_file(path, old, new)``: files,
  paths relative to the working directory;
* ``python(code)``: a Python script (the standard library);
* ``submit()``: runs the task's tests (``tests/test.sh``, Harbor's verifier contract) on a clean
  copy of the working directory as it is, and ends the episode with their reward
  (``reward.json``'s named rewards are the breakdown).

Grading (RFC 0015; :mod:`harbor_env.sandbox`): the tests' verdict counts only when ``test.sh``
ran to completion (exit status 0, not signalled, not timed out, no process of its left behind);
otherwise the reward is 0 whatever the reward files say. Feedback is strict by default (the
runtime passes the reward and nothing else of a graded step); a session may ask for rich feedback
at reset (``options={"feedback": "rich"}``): the named rewards, the tests' exit code, the tail of
their output and why a verdict did not count.

Everything runs in the session's :class:`openenv.sandbox.Sandbox` (:mod:`harbor_env.sandbox`):
no network, bounded time, memory, processes and disk; the task's tests and solution are never in
it before the grading call, and its files (this package, the task directories) are secrets the
sandbox checks invisible. ``task.toml``'s ``[agent] timeout_sec`` bounds the episode: once it is
spent, the next tool call grades the workspace as it is and ends the episode (its result is then
what ``submit`` would have returned: the reward alone with strict feedback).

Tasks: the shipped set (``harbor_env/tasks``: splits ``train`` and ``test``), or
``$HARBOR_TASKS`` (a task directory, a directory of tasks, or a directory of splits;
:func:`harbor_env.task.load_tasks`), or :meth:`HarborEnvironment.with_tasks`. ``reset`` takes
``options={"task_id": ...}`` or ``{"split": ...}``; a seed picks deterministically.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import openenv
from harbor_env.container import ContainerBox, docker_available, ensure_base_image, ensure_packages
from harbor_env.sandbox import SHM, TaskBox, Verdict
from harbor_env.task import HarborTask, TaskError, TaskSet, load_tasks
from openenv.rubrics import Score
from openenv.sandbox import Limits, SandboxUnavailable

TASKS_ENV = "HARBOR_TASKS"
#: ``sandbox`` (default) or ``container``: how tasks run (docs/harbor.md).
MODE_ENV = "HARBOR_MODE"
SHIPPED = Path(__file__).resolve().parent / "tasks"
_PACKAGE_DIR = str(Path(__file__).resolve().parent)
MAX_STEPS = 200
COMMAND_TIMEOUT_S = 120.0
MAX_ARG_CHARS = 200_000
MAX_READ = 64 * 1024
INSTRUCTIONS = (
    "\n\n---\nYou work in the task's environment through tools; its working directory is {workdir}. "
    "shell(command) runs a bash command there (each call starts in {workdir}; files persist, processes do not); "
    "read_file(path), write_file(path, content) and edit_file(path, old, new) work on files (paths relative to "
    "{workdir}); python(code) runs a script. When you are done, call submit(): the task's tests grade {workdir} "
    "and the episode ends. Time limit: {timeout:g} s."
)

_FILE_OP = r"""
import json, os, sys
a = json.loads(sys.stdin.read())
path = a["path"] if os.path.isabs(a["path"]) else os.path.join(a["cwd"], a["path"])
op = a["op"]
if op == "read":
    with open(path, "rb") as f:
        data = f.read(a["max"] + 1)
    text = data[: a["max"]].decode("utf-8", "replace")
    sys.stdout.write(json.dumps({"content": text, "truncated": len(data) > a["max"]}))
elif op == "write":
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(a["content"])
    sys.stdout.write(json.dumps({"written": len(a["content"].encode())}))
else:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    n = text.count(a["old"])
    if n != 1:
        why = f"old text found {n} times in {a['path']} (it must be found exactly once)"
        sys.stdout.write(json.dumps({"error": why}))
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(a["old"], a["new"], 1))
        sys.stdout.write(json.dumps({"replaced": 1}))
"""


def _runs(language: str, argument: str, output: str | None = "stdout") -> dict[str, Any]:
    """The tool annotation declaring a tool that runs the agent's code (RFC 0010)."""
    spec: dict[str, Any] = {"language": language, "argument": argument}
    if output:
        spec["output"] = output
    return {"openenv/sandbox": spec}


CONTAINER_INSTRUCTIONS = (
    "\n\n---\nYou work inside the task's container through tools; its working directory is {workdir}. "
    "shell(command) runs a bash command there (each call starts in {workdir}; files and background processes "
    "persist); read_file(path), write_file(path, content) and edit_file(path, old, new) work on files (paths relative "
    "to {workdir}); python(code) runs a script with the container's python3. When you are done, call submit(): the "
    "task's tests grade the container as you left it and the episode ends. Time limit: {timeout:g} s."
)


def _mode() -> str:
    mode = os.environ.get(MODE_ENV, "").strip() or "sandbox"
    if mode not in ("sandbox", "container"):
        raise ValueError(f"${MODE_ENV} must be 'sandbox' or 'container', not {mode!r}")
    return mode


def _default_tasks() -> TaskSet:
    path = os.environ.get(TASKS_ENV, "").strip()
    return load_tasks(path or SHIPPED, mode=_mode())


class HarborEnvironment(openenv.Environment):
    """Harbor-format tasks (task.toml, instruction.md, environment/, tests/, solution/) in a sandbox."""

    name = "harbor_env"
    version = "0.1.0"
    description = (
        "Harbor-format tasks (task.toml, instruction.md, environment/Dockerfile, tests/test.sh): the agent works "
        "in the task's environment in a sandbox (shell, files), the task's own tests grade it."
    )
    deterministic = False
    max_episode_steps = MAX_STEPS
    max_sessions = 16
    reward_range = (0.0, 1.0)
    example_actions = (
        openenv.CallToolAction("shell", {"command": "ls -la"}),
        openenv.CallToolAction("write_file", {"path": "notes.txt", "content": "hello\n"}),
        openenv.CallToolAction("read_file", {"path": "notes.txt"}),
        openenv.CallToolAction("python", {"code": "print(1 + 1)"}),
        openenv.CallToolAction("submit", {}),
    )
    limits: ClassVar[Limits] = Limits(
        wall_s=COMMAND_TIMEOUT_S,
        cpu_s=int(COMMAND_TIMEOUT_S),
        memory_bytes=1024 * 1024 * 1024,
        processes=64,
        disk_bytes=256 * 1024 * 1024,
        files=16384,
        open_files=256,
    )
    #: ``"sandbox"`` (the Dockerfile interpreted into openenv.sandbox) or ``"container"`` (each task in a
    #: container built from its Dockerfile, :mod:`harbor_env.container`); ``$HARBOR_MODE``.
    mode: ClassVar[str] = _mode()
    tasks: ClassVar[TaskSet] = _default_tasks()
    #: RFC 0015: ``submit`` grades; strict feedback unless a session asks for rich at reset. Public
    #: metadata: what reset and every step say that does not depend on the tests' verdict.
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=("task_id", "split", "workdir", "steps"))
    metadata: ClassVar[dict[str, Any]] = {
        "author": "openenv",
        "documentation_url": "docs/harbor.md",
        "tasks": len(tasks),
    }
    task_splits: ClassVar[dict[str, str]] = {s: f"the {s} tasks" for s in tasks.splits}

    @classmethod
    def with_tasks(
        cls, path: str | os.PathLike[str] | TaskSet, *, name: str | None = None, mode: str | None = None
    ) -> type[HarborEnvironment]:
        """A subclass serving the tasks at ``path`` (checked now: a task that cannot run here fails
        with :class:`harbor_env.task.TaskError` naming it and what is missing). ``mode``:
        ``"sandbox"`` or ``"container"`` (default: this class's, ``$HARBOR_MODE``)."""
        mode = mode or cls.mode
        taskset = path if isinstance(path, TaskSet) else load_tasks(path, mode=mode)
        attrs: dict[str, Any] = {
            "mode": mode,
            "tasks": taskset,
            "metadata": {**cls.metadata, "tasks": len(taskset)},
            "task_splits": {s: f"the {s} tasks" for s in taskset.splits},
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.with_tasks",
        }
        if name:
            attrs["name"] = name
        return type(f"{cls.__name__}WithTasks", (cls,), attrs)

    @classmethod
    def secrets(cls) -> list[str]:
        """What the agent's code must never see: this package (the shipped tasks) and the task
        directories (tests and solutions)."""
        return [_PACKAGE_DIR, *cls.tasks.sources, *(str(t.path) for t in cls.tasks)]

    @classmethod
    def new_box(cls) -> TaskBox | ContainerBox:
        if cls.mode == "container":
            return ContainerBox()
        return TaskBox(cls.limits, cls.secrets())

    @classmethod
    def preflight(cls) -> None:
        """Refuse to serve where the agent's commands cannot be confined as required."""
        if cls.mode == "container":
            why = docker_available()
            if why:
                raise RuntimeError(f"{cls.__name__} (container mode) needs a Docker engine: {why}")
            ensure_base_image()
            ensure_packages()
            return
        box = cls.new_box()
        try:
            box.start(next(iter(cls.tasks)))
        except SandboxUnavailable as e:
            raise RuntimeError(f"{cls.__name__} cannot run commands safely on this machine: {e}") from None
        finally:
            box.close()

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """Every task (RFC 0015): the reference is its ``solution/solve.sh`` run through the
        ``shell`` tool, then ``submit`` (with the rest of ``solution/`` unpacked into
        ``/solution`` first when solve.sh is not alone there); the null is ``submit`` at once."""
        submit = openenv.CallToolAction("submit", {})
        probes = []
        for task in cls.tasks:
            command = _reference_command(task, container=cls.mode == "container")
            reference = None if command is None else [openenv.CallToolAction("shell", {"command": command}), submit]
            probes.append(openenv.GradingProbe(task_id=task.id, reference=reference, null=[[submit]]))
        return probes

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [
            openenv.TaskInfo(t.id, split, {k: v for k, v in t.metadata.items() if isinstance(v, (str, int, float))})
            for t in cls.tasks
            if t.split == split
        ]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.box = self.new_box()
        self._begin(self._pick(options.get("seed"), options))

    def _pick(self, seed: Any, options: Mapping[str, Any]) -> HarborTask:
        try:
            if options.get("task_id") is not None:
                return self.tasks.by_id(str(options["task_id"]))
            pool = self.tasks.in_split(options.get("split"))
            rng = random.Random(None if seed is None else int(seed))
            return pool[rng.randrange(len(pool))]
        except (TypeError, ValueError, KeyError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def _begin(self, task: HarborTask, feedback: str = "strict") -> None:
        self.task = task
        self.feedback = feedback
        self.steps = 0
        self.verdict: Verdict | None = None
        self.started = time.monotonic()
        self.setup_problems: list[str] = []
        self.ready = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        opts = options or {}
        self._begin(self._pick(seed, opts), str(opts.get("feedback") or "strict"))
        self._setup()
        task = self.task
        template = CONTAINER_INSTRUCTIONS if self.mode == "container" else INSTRUCTIONS
        text = task.instruction + template.format(workdir=task.build.workdir, timeout=task.agent_timeout_s)
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(
            obs,
            metadata={"task_id": task.id, "split": task.split, "workdir": task.build.workdir},
        )

    def _setup(self) -> None:
        try:
            self.setup_problems = self.box.start(self.task)
        except SandboxUnavailable as e:
            raise RuntimeError(f"the sandbox cannot run commands safely on this machine: {e}") from None
        if self.setup_problems:
            raise RuntimeError(f"task {self.task.id}: its environment could not be set up: {self.setup_problems[0]}")
        self.started = time.monotonic()
        self.ready = True

    def close(self) -> None:
        self.box.close()

    # -- tools

    def _left(self) -> float:
        return self.task.agent_timeout_s - (time.monotonic() - self.started)

    def _guard(self, *texts: str) -> dict[str, Any] | None:
        """Checks before any tool acts; returns the time-up result (the workspace graded as it
        is) when the task's time is spent, None otherwise."""
        if self.verdict is not None:
            raise ValueError("the task was submitted: the episode is over")
        if not self.ready:
            self._setup()
        if sum(len(t) for t in texts) > MAX_ARG_CHARS:
            raise ValueError(f"arguments are limited to {MAX_ARG_CHARS} characters")
        if self._left() <= 0:
            return self._time_up()
        return None

    def _wall(self) -> float:
        return max(1.0, min(COMMAND_TIMEOUT_S, self._left()))

    def _file_op(self, **args: Any) -> dict[str, Any]:
        payload = json.dumps({**args, "cwd": self.task.build.workdir, "max": MAX_READ}).encode()
        r = self.box.python(_FILE_OP, self._wall(), stdin=payload)
        if r.exit_code != 0:
            last = (r.stderr.strip().splitlines() or ["failed"])[-1]
            raise ValueError(f"{args['op']} {args['path']}: {last}")
        out: dict[str, Any] = json.loads(r.stdout)
        if "error" in out:
            raise ValueError(out["error"])
        return out

    @openenv.tool(timeout_s=COMMAND_TIMEOUT_S + 60, annotations=_runs("shell", "command"))
    def shell(self, command: str) -> dict[str, Any]:
        """Run a bash command in the task's working directory.

        Args:
            command: the command (a bash script); its stdout and stderr are returned (each at most 64 KiB).
        """
        if (up := self._guard(command)) is not None:
            return up
        r = self.box.shell(command, self._wall())
        return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code, "timed_out": r.timed_out}

    @openenv.tool(timeout_s=COMMAND_TIMEOUT_S + 60, annotations=_runs("python", "code"))
    def python(self, code: str) -> dict[str, Any]:
        """Run a Python script (standard library) in the task's working directory.

        Args:
            code: the script; its stdout and stderr are returned (each at most 64 KiB).
        """
        if (up := self._guard(code)) is not None:
            return up
        r = self.box.python(code, self._wall())
        return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code, "timed_out": r.timed_out}

    @openenv.tool(timeout_s=COMMAND_TIMEOUT_S + 60, annotations={"readOnlyHint": True})
    def read_file(self, path: str) -> dict[str, Any]:
        """Read a text file (at most 64 KiB).

        Args:
            path: relative to the working directory, or absolute.
        """
        if (up := self._guard(path)) is not None:
            return up
        return self._file_op(op="read", path=path)

    @openenv.tool(timeout_s=COMMAND_TIMEOUT_S + 60)
    def write_file(self, path: str, content: str) -> dict[str, Any]:
        """Write a text file (its directories are made).

        Args:
            path: relative to the working directory, or absolute.
            content: the file's new text.
        """
        if (up := self._guard(path, content)) is not None:
            return up
        return self._file_op(op="write", path=path, content=content)

    @openenv.tool(timeout_s=COMMAND_TIMEOUT_S + 60)
    def edit_file(self, path: str, old: str, new: str) -> dict[str, Any]:
        """Replace the one occurrence of ``old`` in a text file with ``new``.

        Args:
            path: relative to the working directory, or absolute.
            old: the text to replace; it must occur exactly once.
            new: its replacement.
        """
        if (up := self._guard(path, old, new)) is not None:
            return up
        return self._file_op(op="edit", path=path, old=old, new=new)

    @openenv.tool(timeout_s=1000.0, grades=True)
    def submit(self) -> dict[str, Any]:
        """Grade the working directory with the task's tests; this ends the episode."""
        if (up := self._guard()) is not None:
            return up
        return self._grade()

    def _grade(self) -> dict[str, Any]:
        self.verdict = self.box.verify()
        # Strict feedback: the reward alone (the runtime replaces submit's result too, but the
        # time-up path answers through shell, python and the file tools, which do not grade).
        return self.verdict.rich() if self.feedback == "rich" else self.verdict.strict()

    def _time_up(self) -> dict[str, Any]:
        out = self._grade()
        out["note"] = f"the task's time ({self.task.agent_timeout_s:g} s) is up: the workspace was graded as it was"
        return out

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        self.steps += 1
        meta: dict[str, Any] = {"steps": self.steps, "task_id": self.task.id}
        if self.verdict is None:
            return openenv.StepResult(observation, reward=0.0, metadata=meta)
        v = self.verdict
        if self.feedback == "rich":
            children = [Score(r, name=k) for k, r in v.rewards.items() if k != "reward"]
            breakdown = Score(v.reward, name="reward", children=children, reason=v.error or "the task's tests")
            meta["verifier"] = {"rewards": v.rewards, "error": v.error, "exit_code": v.detail.get("exit_code")}
        else:  # the runtime cuts it to this too (strict feedback): nothing but the reward
            breakdown = Score(v.reward, name="reward")
        return openenv.StepResult(
            observation, reward=v.reward, terminated=True, metadata=meta, reward_breakdown=breakdown
        )

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id,
            "split": self.task.split,
            "steps": self.steps,
            "submitted": self.verdict is not None,
            "reward": None if self.verdict is None else self.verdict.reward,
            "isolation": self.box.isolation,
        }


def _reference_command(task: HarborTask, *, container: bool = False) -> str | None:
    """The task's reference solution as one ``shell`` command (for :meth:`HarborEnvironment.grading_probes`):
    solve.sh's text, or, when ``solution/`` holds more than solve.sh, a command that unpacks it
    into ``/solution`` (in ``/dev/shm``, emptied after the call) and runs it there, as the oracle
    does. None without a solve.sh."""
    solve = task.path / "solution" / "solve.sh"
    if not solve.is_file():
        return None
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in task.solution_env.items())
    if container:  # /solution in the task's container for the one call (Harbor's oracle), then gone
        data = base64.b64encode(task.solution_tar or b"").decode()
        return (
            f"rm -rf /solution && mkdir -p /solution && base64 -d <<'EOF' | tar -x -C /solution\n{data}\nEOF\n"
            f"{exports}cd {shlex.quote(task.build.workdir)} && bash /solution/solve.sh; s=$?; rm -rf /solution; exit $s"
        )
    others = [p for p in (task.path / "solution").rglob("*") if p.is_file() and p != solve]
    if not others and task.solution_tar is not None:
        return exports + solve.read_text(encoding="utf-8")
    data = base64.b64encode(task.solution_tar or b"").decode()
    return (
        f"mkdir -p {SHM}/solution && base64 -d <<'EOF' | tar -x -C {SHM}/solution\n{data}\nEOF\n"
        f"{exports}cd {shlex.quote(task.build.workdir)} && bash /solution/solve.sh"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve Harbor tasks over gRPC (and HTTP).")
    ap.add_argument("tasks", nargs="?", help="a task directory, a directory of tasks or of splits (default: shipped)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ap.add_argument(
        "--mode", choices=("sandbox", "container"), default=None, help="default: $HARBOR_MODE, else sandbox"
    )
    ns = ap.parse_args(argv)
    if ns.tasks or ns.mode:
        factory = HarborEnvironment.with_tasks(ns.tasks or HarborEnvironment.tasks.sources[0], mode=ns.mode)
    else:
        factory = HarborEnvironment
    openenv.serve(factory, ns.host, ns.port, ready=lambda s: print(f"harbor_env serving on {s.address}"))


__all__ = ["HarborEnvironment", "TaskError", "main"]
