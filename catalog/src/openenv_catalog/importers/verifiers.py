"""``verifiers:MODULE``: a verifiers (Prime Intellect) taskset as an openenv environment.

verifiers 0.4 pins ``mcp==2.0.0`` while openenv's HTTP side needs ``mcp>=2.3``: the two cannot
share an interpreter. So the taskset runs in verifiers' own one, in a worker process
(:mod:`openenv.verifiers_env.worker`, spawned once per imported taskset and shared by its
sessions), and this environment talks to it over a pipe, one JSON line per message. The
interpreter is named by ``OPENENV_VERIFIERS_PYTHON``: one holding verifiers and openenv's core
(``python tools/verifiers_venv.py`` builds it from the committed lock and prints its path).

``MODULE`` is a verifiers taskset id (an installed taskset package, or a module on the worker's
``PYTHONPATH`` or in the server's working directory, exporting its ``vf.Taskset`` subclass in
``__all__``), loaded by verifiers' own loader. Tasks a text reply can solve are served (a task
that needs a container, tool servers or a runtime to score is refused, saying which):

* **Tasks** (RFC 0004): the split ``all``, one task per task of the taskset (its id when the
  source gives each one, else its position); ``reset(seed=s)`` plays task ``s mod n``.
* **Observation**: the task's opening messages (system prompt and prompt), as text; the tool
  ``get_prompt`` returns them as chat messages. Nothing else of the task's data (its answer,
  its other fields) leaves the worker: not in an observation, a task's metadata, the state or
  an error.
* **Reward**: ``submit(answer)`` (a grading tool, RFC 0015) scores the answer as the final
  assistant reply with the task's own ``@vf.reward``/``@vf.metric`` functions and judges
  (verifiers' ``Task.score``), and ends the episode; the reward is verifiers' weighted sum,
  the breakdown its named rewards. A strict episode (the default) sees the reward only and may
  not call ``submit`` outside a step; a ``rich`` one (evaluation) sees the named rewards and may.
  A scorer that raises gives the answer 0 (its message, which may quote hidden data, goes to
  the server's log only).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import itertools
import json
import os
import random
import re
import subprocess
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import openenv
from openenv.rubrics import Score
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CURATED", "ENV_PYTHON", "VerifiersEnvironment", "load"]

CURATED: tuple[str, ...] = ()
"""None: a verifiers taskset lives in an interpreter the catalog does not build."""

ENV_PYTHON = "OPENENV_VERIFIERS_PYTHON"
"""The environment variable naming verifiers' interpreter."""

UNAVAILABLE = (
    "verifiers cannot be installed next to openenv (verifiers 0.4 pins mcp==2.0.0, protoenv[http] needs "
    f"mcp>=2.3): it runs in an interpreter of its own, named by {ENV_PYTHON} "
    "(`python tools/verifiers_venv.py` builds one and prints its path)"
)

#: Seconds the worker may take to import verifiers and load the taskset (verifiers' import alone
#: takes ~10 s on a loaded 2-core machine).
READY_TIMEOUT_S = 300.0
#: Seconds one request may take (the worker bounds scoring by 600 s, or the task's own timeout).
REQUEST_TIMEOUT_S = 660.0
MAX_ANSWER_CHARS = 100_000


class WorkerError(RuntimeError):
    """The worker could not start, exited, or answered a request with an error."""


class _Worker:
    """The worker process of one taskset (see the module's text): requests from any thread, each
    answered by its id; a worker that exited is started again on the next request."""

    def __init__(self, python: str, module: str) -> None:
        self.python, self.module = python, module
        self.ready: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._pending: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    def _start(self) -> dict[str, Any]:
        argv = [self.python, "-m", "openenv.verifiers_env.worker", self.module]
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1
            )
        except OSError as e:
            raise ImporterUnavailable(f"cannot start verifiers' interpreter {self.python!r}: {e}") from e
        first: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        pending = self._pending = {}
        threading.Thread(
            target=self._read, args=(proc, first, pending), name=f"verifiers-worker-{self.module}", daemon=True
        ).start()
        try:
            ready = first.result(READY_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            proc.kill()
            raise WorkerError(f"verifiers:{self.module}: no worker ready after {READY_TIMEOUT_S:g} s") from None
        if not ready.get("ready"):
            proc.wait()
            raise WorkerError(f"verifiers:{self.module}: {ready.get('error') or 'the worker did not start'}")
        self._proc = proc
        return ready

    def _read(
        self,
        proc: subprocess.Popen[str],
        first: concurrent.futures.Future[dict[str, Any]],
        pending: dict[int, concurrent.futures.Future[dict[str, Any]]],
    ) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not the protocol's (the worker keeps stdout for it: should not happen)
            if not first.done():
                first.set_result(message if isinstance(message, dict) else {"error": "malformed first line"})
                continue
            rid = message.get("id") if isinstance(message, dict) else None
            future = pending.pop(rid, None) if isinstance(rid, int) else None
            if future is not None and not future.done():
                future.set_result(message)
        code = proc.wait()
        error = WorkerError(f"verifiers:{self.module}: the worker exited (status {code}); see the server's log")
        if not first.done():
            first.set_result({"ready": False, "error": f"the worker exited (status {code}) before it was ready"})
        for future in list(pending.values()):
            if not future.done():
                future.set_exception(error)
        pending.clear()

    def start(self) -> dict[str, Any]:
        """Start the worker (once); its ready message."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                ready = self._start()
                if self.ready and ready.get("tasks") != self.ready.get("tasks"):
                    self._proc = None
                    raise WorkerError(f"verifiers:{self.module}: the restarted worker serves other tasks")
                self.ready = ready
            return self.ready

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """The result of one request; :class:`WorkerError` when the worker answers an error or
        exits."""
        self.start()
        with self._lock:
            proc, rid = self._proc, next(self._ids)
            assert proc is not None and proc.stdin is not None
            future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
            self._pending[rid] = future
            try:
                proc.stdin.write(json.dumps({"id": rid, "op": op, **fields}) + "\n")
                proc.stdin.flush()
            except OSError as e:
                self._pending.pop(rid, None)
                raise WorkerError(f"verifiers:{self.module}: the worker is gone ({e})") from None
        try:
            answer = future.result(REQUEST_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            self._pending.pop(rid, None)
            raise WorkerError(f"verifiers:{self.module}: no answer to {op} in {REQUEST_TIMEOUT_S:g} s") from None
        if "error" in answer:
            raise WorkerError(str(answer["error"]))
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            assert proc.stdin is not None
            try:
                proc.stdin.close()  # end of input ends the worker
                proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


def _text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        if content:
            parts.append(str(content))
    return "\n\n".join(parts)


class VerifiersEnvironment(openenv.Environment):
    """Base of imported verifiers tasksets (one subclass per taskset, made by :func:`load`)."""

    verifiers_module: ClassVar[str] = ""
    verifiers_tasks: ClassVar[tuple[str, ...]] = ()
    worker: ClassVar[_Worker | None] = None
    run_in_thread = True
    max_sessions = 64
    max_episode_steps = 10
    # The score is a verdict on hidden data (the task's answer): a strict episode sees only the
    # reward; evaluation may ask for the named rewards ("rich" at reset).
    grading = openenv.Grading(feedback="strict", offers=("strict", "rich"), public_metadata=("task_id",))
    task_splits: ClassVar[Mapping[str, str]] = {"all": "every task of the verifiers taskset"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._index: int | None = None
        self._messages: list[dict[str, Any]] = []
        self._reward: float | None = None
        self._breakdown: Score | None = None
        self._submitted = False

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [openenv.TaskInfo(t, "all", {}) for t in cls.verifiers_tasks] if split == "all" else []

    def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.worker is not None
        try:
            return self.worker.request(op, **fields)
        except WorkerError as e:
            raise openenv.Unavailable(str(e)) from None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        n = len(self.verifiers_tasks)
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            if task_id not in self.verifiers_tasks:
                raise openenv.InvalidArgument(f"unknown task {task_id!r}")
            index = self.verifiers_tasks.index(task_id)
        else:
            index = (random.randrange(n) if seed is None else int(seed)) % n
        self._messages = list(self._call("prompt", index=index).get("messages") or [])
        self._index, self._reward, self._breakdown, self._submitted = index, None, None, False
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": _text(self._messages)}]))
        return openenv.StepResult(obs, metadata={"task_id": self.verifiers_tasks[index]})

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_prompt(self) -> dict[str, Any]:
        """The task's opening messages (system prompt, prompt) as chat messages."""
        if self._index is None:
            raise openenv.FailedPrecondition("no episode: reset first")
        return {"messages": self._messages}

    @openenv.tool(grades={"argument": "answer", "language": "text"})
    def submit(self, answer: str) -> dict[str, Any]:
        """Submit the final answer: it is scored by the task's own verifiers rewards, and ends the
        episode.

        Args:
            answer: the final reply, in the form the prompt asks for.
        """
        if self._index is None:
            raise openenv.FailedPrecondition("no episode: reset first")
        if len(answer) > MAX_ANSWER_CHARS:
            raise openenv.InvalidArgument(f"answers are limited to {MAX_ANSWER_CHARS} characters")
        scored = self._call("score", index=self._index, reply=answer)
        reward = scored.get("reward")
        self._reward = float(reward) if isinstance(reward, (int, float)) else 0.0  # a scorer that raised: 0
        children = [
            Score(float(r["score"]), name=str(name), weight=float(r["weight"]))
            for name, r in (scored.get("rewards") or {}).items()
            if isinstance(r, Mapping)
        ]
        self._breakdown = Score(self._reward, name="verifiers", children=children)
        return {"reward": self._reward, "rewards": {c.name: c.score for c in children}}

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        ok = observation.result is not None and not observation.result.is_error
        done = action.tool_name == "submit" and ok and self._reward is not None
        self._submitted = self._submitted or done
        return openenv.StepResult(
            observation,
            reward=self._reward if done else 0.0,
            terminated=done,
            reward_breakdown=self._breakdown if done else None,
            metadata={"task_id": self.verifiers_tasks[self._index]} if self._index is not None else {},
        )

    def state(self) -> dict[str, Any]:
        task = self.verifiers_tasks[self._index] if self._index is not None else None
        return {"taskset": self.verifiers_module, "task_id": task, "submitted": self._submitted}


def _python() -> str:
    python = os.environ.get(ENV_PYTHON)
    if not python:
        raise ImporterUnavailable(UNAVAILABLE)
    return python


@functools.lru_cache(maxsize=16)
def load(module: str) -> type[VerifiersEnvironment]:
    """The environment class of the verifiers taskset ``module`` (see the module's text): its
    worker is started in verifiers' interpreter and its tasks read once."""
    if not re.fullmatch(r"[A-Za-z_][\w.\-/@]*", module):
        raise ValueError(f"verifiers:{module}: expected verifiers:TASKSET (a taskset id or module name)")
    worker = _Worker(_python(), module)
    ready = worker.start()
    atexit.register(worker.close)
    tasks = tuple(str(t) for t in ready.get("tasks") or ())
    ident = re.sub(r"[^a-z0-9]+", "-", module.lower()).strip("-")
    attrs: dict[str, Any] = {
        "name": f"verifiers-{ident}",
        "version": "0.1",
        "description": (
            f"The verifiers taskset {module} ({ready.get('taskset')}, verifiers {ready.get('verifiers')}), imported: "
            f"its {len(tasks)} tasks, scored by its rewards ({', '.join(ready.get('rewards') or ())})."
        ),
        "verifiers_module": module,
        "verifiers_tasks": tasks,
        "worker": worker,
        "example_actions": (
            openenv.CallToolAction("get_prompt", {}),
            openenv.CallToolAction("submit", {"answer": "42"}),
        ),
        "metadata": {"source": f"verifiers:{module}", "kind": "verifiers"},
    }
    return type(f"Verifiers_{ident.replace('-', '_')}", (VerifiersEnvironment,), attrs)
