"""A verifiers taskset behind a pipe: the worker of ``openenv import verifiers:MODULE``.

Runs in verifiers' own interpreter (verifiers 0.4 pins ``mcp==2.0.0``, openenv's ``http`` extra
needs ``mcp>=2.3``; ``tools/verifiers_venv.py`` builds that interpreter with this tree's core)::

    python -m openenv.verifiers_env.worker MODULE

``MODULE`` is a verifiers taskset id, resolved by verifiers' own loader (``vf.load_taskset``: an
installed taskset package, or a module on ``PYTHONPATH`` or in the working directory, exporting
its ``vf.Taskset`` subclass in ``__all__``). The worker loads it once, then answers requests of
the openenv environment that spawned it (``openenv_catalog.importers.verifiers``).

Protocol: one JSON object per line. The worker's first line is ``{"ready": true, "verifiers":
VERSION, "taskset": CLASS, "tasks": [ID, ...], "rewards": [NAME, ...]}`` (or ``{"ready": false,
"error": TEXT}``, then it exits). Each request ``{"id": N, "op": OP, ...}`` is answered by one
line ``{"id": N, "result": {...}}`` or ``{"id": N, "error": TEXT}``, in any order (requests run
concurrently):

* ``prompt`` ``{"index": I}``: task ``I``'s opening messages (its ``system_prompt`` and
  ``prompt``, as verifiers' harnesses send them): ``{"messages": [{"role", "content"}, ...]}``.
  Nothing else of the task's data leaves the worker: its answer, its other fields;
* ``score`` ``{"index": I, "reply": TEXT}``: the reply scored by the task's own ``@vf.reward``,
  ``@vf.metric`` and judges (``Task.score``, verifiers' scoring of a finished rollout, on a
  ``vf.Trace`` of the prompt and the reply): ``{"reward": R, "rewards": {NAME: {"score",
  "weight"}}, "metrics": {...}}``. A scorer that raises is ``{"reward": null, "failed": TYPE}``:
  its message, which may quote the task's hidden data, goes to this process's stderr only.

The protocol owns the worker's real stdout; ``print`` in the taskset's code goes to stderr.
End of input ends the worker. Only tasks a text reply can solve are served: a task that needs
a container, tool servers or a runtime to score is refused at load, saying which.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import threading
import traceback
from typing import Any, TextIO

#: At most this many tasks of a taskset are served (an infinite taskset: its first ones).
MAX_TASKS = 100_000
#: Scoring that takes longer than this (seconds) fails (a task's own ``timeout.scoring`` wins).
SCORING_TIMEOUT_S = 600.0


class Refused(Exception):
    """The taskset cannot be served as a text environment (the message says why)."""


def _requires_runtime(fn: Any) -> bool:
    import inspect

    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def load(module: str) -> tuple[Any, list[Any], list[str], list[str]]:
    """``(taskset, tasks, task_ids, reward_names)`` of a taskset id; :class:`Refused` says why
    one cannot be served."""
    import verifiers.v1 as vf

    config = vf.taskset_config_type(module)(id=module)
    taskset = vf.load_taskset(config)
    if taskset.toolsets(config):
        raise Refused(f"taskset {module!r} serves tool servers (Taskset.toolsets): not a text task")
    tasks = list(itertools.islice(iter(taskset), MAX_TASKS))
    if not tasks:
        raise Refused(f"taskset {module!r} has no tasks")
    first = tasks[0]
    if getattr(first, "NEEDS_CONTAINER", False):
        raise Refused(f"taskset {module!r}: its tasks need a container runtime (Task.NEEDS_CONTAINER)")
    if type(first).toolsets(first.config):
        raise Refused(f"taskset {module!r}: its tasks serve tool servers (Task.toolsets): not a text task")
    needs = [fn.__name__ for kind in ("reward", "metric") for fn in first.hooks(kind) if _requires_runtime(fn)]
    needs += [j.reward_name for j in first.plugged_judges() if _requires_runtime(j.score)]
    if needs:
        raise Refused(f"taskset {module!r}: scoring needs a runtime (a box the reply ran in): {', '.join(needs)}")
    rewards = [fn.__name__ for fn in first.hooks("reward")] + [j.reward_name for j in first.plugged_judges()]
    if not rewards:
        raise Refused(f"taskset {module!r}: its tasks declare no reward (@vf.reward or a judge)")
    ids = [t.data.id for t in tasks]
    if any(i is None for i in ids) or len(set(ids)) != len(ids):
        ids = [str(t.data.idx) for t in tasks]  # positions, when the source's ids do not name each task
    return taskset, tasks, [str(i) for i in ids], rewards


def prompt_messages(task: Any) -> list[Any]:
    """The task's opening messages, as verifiers' harnesses send them: its system prompt, then
    its prompt (a string is one user message)."""
    import verifiers.v1 as vf

    data = task.data
    prompt = data.prompt
    messages: list[Any] = []
    if data.system_prompt is not None:
        messages.append(vf.SystemMessage(content=data.system_prompt))
    if isinstance(prompt, str):
        messages.append(vf.UserMessage(content=prompt))
    elif prompt is not None:
        messages.extend(prompt)
    return messages


async def score(task: Any, reply: str) -> dict[str, Any]:
    """The reply scored by the task (see the module's text)."""
    import verifiers.v1 as vf

    nodes: list[Any] = []
    for m in [*prompt_messages(task), vf.AssistantMessage(content=reply)]:
        sampled = isinstance(m, vf.AssistantMessage)
        nodes.append(vf.MessageNode(parent=len(nodes) - 1 if nodes else None, message=m, sampled=sampled))
    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
        is_completed=True,
        ok=True,
        stop_condition="final_reply",
    )
    limit = task.data.timeout.scoring or SCORING_TIMEOUT_S
    await asyncio.wait_for(task.score(trace), limit)
    return {
        "reward": float(trace.reward),
        "rewards": {k: None if r is None else {"score": r.score, "weight": r.weight} for k, r in trace.rewards.items()},
        "metrics": dict(trace.metrics),
    }


class Worker:
    """Answers the requests of one line-oriented channel (see the module's text)."""

    def __init__(self, tasks: list[Any], out: TextIO) -> None:
        self.tasks = tasks
        self.out = out
        self._write = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False)
        with self._write:
            self.out.write(line + "\n")
            self.out.flush()

    def _task(self, request: dict[str, Any]) -> Any:
        index = request.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.tasks):
            raise ValueError(f"no task at index {index!r} (there are {len(self.tasks)})")
        return self.tasks[index]

    async def handle(self, request: dict[str, Any]) -> None:
        rid = request.get("id")
        try:
            op = request.get("op")
            if op == "prompt":
                messages = [m.model_dump(mode="json", exclude_none=True) for m in prompt_messages(self._task(request))]
                result: dict[str, Any] = {"messages": messages}
            elif op == "score":
                reply = request.get("reply")
                if not isinstance(reply, str):
                    raise ValueError("score needs the reply as a string")
                task = self._task(request)
                try:
                    result = await score(task, reply)
                except Exception as e:  # noqa: BLE001 - the scorer's failure is the reply's, not the worker's
                    print(f"verifiers worker: scoring task {task.data.idx} failed:", file=sys.stderr)
                    traceback.print_exc(file=sys.stderr)
                    result = {"reward": None, "failed": type(e).__name__}
            else:
                raise ValueError(f"unknown op {op!r} (prompt, score)")
        except Exception as e:  # noqa: BLE001 - a bad request is answered, never fatal
            self.send({"id": rid, "error": f"{type(e).__name__}: {e}"})
            return
        self.send({"id": rid, "result": result})

    async def serve(self, lines: TextIO) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        def read() -> None:  # a thread: stdin is a pipe, read line by line
            for line in lines:
                loop.call_soon_threadsafe(queue.put_nowait, line)
            loop.call_soon_threadsafe(queue.put_nowait, None)

        threading.Thread(target=read, name="verifiers-worker-stdin", daemon=True).start()
        running: set[asyncio.Task[None]] = set()
        while (line := await queue.get()) is not None:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request is a JSON object")
            except ValueError as e:
                self.send({"id": None, "error": f"unreadable request: {e}"})
                continue
            task = asyncio.create_task(self.handle(request))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # The protocol keeps the real stdout; anything the taskset prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if len(args) != 1:
        out.write(json.dumps({"ready": False, "error": "usage: python -m openenv.verifiers_env.worker MODULE"}) + "\n")
        return 2
    sys.path.insert(0, os.getcwd())  # a taskset module next to the caller
    try:
        import verifiers

        taskset, tasks, ids, rewards = load(args[0])
    except Exception as e:  # noqa: BLE001 - reported to the parent as the reason, then exit
        traceback.print_exc(file=sys.stderr)
        reason = str(e) if isinstance(e, Refused) else f"cannot load taskset {args[0]!r}: {type(e).__name__}: {e}"
        out.write(json.dumps({"ready": False, "error": reason}) + "\n")
        out.flush()
        return 1
    worker = Worker(tasks, out)
    name = type(taskset).__name__
    worker.send({"ready": True, "verifiers": verifiers.__version__, "taskset": name, "tasks": ids, "rewards": rewards})
    asyncio.run(worker.serve(sys.stdin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
