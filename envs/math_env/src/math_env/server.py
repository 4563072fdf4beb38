"""The math environment: arithmetic and word problems solved with tools, rewarded by a rubric.

Every step is a tool call (:class:`openenv.CallToolAction`):

* ``get_problem()``: the question;
* ``calculator(expression)``: a safe arithmetic evaluator (no ``eval``);
* ``scratchpad_write(text)`` / ``scratchpad_read()``: notes kept for the episode;
* ``submit_answer(answer)``: ends the episode (terminated).

The reward is the rubric of :mod:`math_env.rubric` (format gate, then correctness minus
a length penalty). ``submit_answer`` is a grading tool (RFC 0015): in a strict episode (the
default) its result is the reward and every step's breakdown the rubric's root; a reset with
``options={"feedback": "rich"}`` gets the whole breakdown and the tool's own result.
``reset(seed=...)`` samples the task deterministically; ``options={"task_id": i}`` or
``{"kind": "word"}`` narrow it.
The tasks are declared (RFC 0004) as splits ``train`` (0-799) and ``test`` (800-999), so
``reset(task_id="17")`` plays task 17.
Episodes are truncated after 10 steps. Served tools-only (``--tools-only``), the agent
gets the task from the handshake options (``seed``, ``task_id``, ``kind``) and can never
reset; ``submit_answer`` is then refused (a grading tool is not a side call in a strict
session).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, ClassVar

import openenv
from math_env.calculator import evaluate
from math_env.rubric import MAX_STEPS, build_rubric
from math_env.tasks import TASKS, Task, sample
from openenv.runtime import snapshots

MAX_SCRATCHPAD_CHARS = 10_000
TRAIN_TASKS = 800

INSTRUCTIONS = (
    "Solve the problem. Tools: calculator(expression), scratchpad_write(text), scratchpad_read(), "
    "get_problem(), submit_answer(answer). Submit a plain number; submitting ends the episode."
)


class MathEnvironment(openenv.Environment):
    """Arithmetic and word problems, solved with a calculator and a scratchpad."""

    name = "math_env"
    version = "0.1.0"
    description = (
        "Arithmetic and word problems solved with calculator and scratchpad tools; "
        "the reward is a rubric (format gate, correctness, length penalty)."
    )
    deterministic = True
    snapshots = True  # RFC 0006: hooks of its own (snapshot, restore): the task by id, never its answer
    max_episode_steps = MAX_STEPS
    run_in_thread = False  # every tool is bounded and cheap: no need to leave the event loop
    max_sessions = 256
    rubric = build_rubric()
    reward_range = (rubric.minimum, rubric.maximum)
    example_actions = (
        openenv.CallToolAction("calculator", {"expression": "12 * (3 + 4)"}),
        openenv.CallToolAction("scratchpad_write", {"text": "first note"}),
        openenv.CallToolAction("submit_answer", {"answer": "84"}),
    )
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "documentation_url": "envs/math_env/README.md"}
    # RFC 0015: submit_answer grades. Strict by default (the reward, the breakdown's root, the
    # step counter); rich on request at reset (the rubric's whole breakdown, the tool's text).
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=("steps",))
    # RFC 0004: the 1,000 tasks as two splits; reset(task_id="17") plays task 17.
    task_splits: ClassVar[dict[str, str]] = {
        "train": f"tasks 0-{TRAIN_TASKS - 1}, both kinds alternating",
        "test": f"tasks {TRAIN_TASKS}-{len(TASKS) - 1}, held out",
    }

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        chosen = TASKS[:TRAIN_TASKS] if split == "train" else TASKS[TRAIN_TASKS:]
        return [openenv.TaskInfo(str(t.id), split, {"kind": t.kind}) for t in chosen]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.feedback = "strict"
        self._start(self._pick(options.get("seed"), options))

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """Six tasks of both kinds and splits: the right answer earns 1, the empty answer 0, and
        another task's answer (a different number) 0."""
        pairs = [(0, 2), (1, 3), (17, 18), (800, 802), (801, 803), (999, 997)]

        def submit(answer: str) -> list[openenv.CallToolAction]:
            return [openenv.CallToolAction("submit_answer", {"answer": answer})]

        return [
            openenv.GradingProbe(
                task_id=str(i),
                reference=submit(str(TASKS[i].answer)),
                null=[submit("")],
                replay=[submit(str(TASKS[other].answer))],
            )
            for i, other in pairs
        ]

    @staticmethod
    def _pick(seed: Any, options: Mapping[str, Any]) -> Task:
        try:
            task_id = options.get("task_id")
            return sample(
                None if seed is None else int(seed), options.get("kind"), None if task_id is None else int(task_id)
            )
        except (TypeError, ValueError) as e:
            raise openenv.InvalidArgument(f"bad task options: {e}") from None

    def snapshot(self) -> bytes:
        """The episode as the task's id and what the agent did (RFC 0006), never the task itself:
        a snapshot is sealed, not encrypted, so its holder reads it, and a grading environment's
        snapshots carry nothing of the hidden data (RFC 0015: the answer stays in the server;
        restore looks the task up by its id)."""
        state = {
            "task": self.task.id,
            "scratchpad": self.scratchpad,
            "steps": self.steps,
            "calculator_calls": self.calculator_calls,
            "submitted": self.submitted,
            "feedback": self.feedback,
        }
        return snapshots.dumps(state, type(self))

    def restore(self, data: bytes) -> None:
        state = snapshots.loads(data, type(self))
        try:
            task = TASKS[int(state["task"])]
            values = (str(state["scratchpad"]), int(state["steps"]), int(state["calculator_calls"]))
            submitted, feedback = state["submitted"], str(state["feedback"])
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise openenv.InvalidArgument(f"not a math_env snapshot: {e!r}") from None
        if submitted is not None and not isinstance(submitted, str):
            raise openenv.InvalidArgument("not a math_env snapshot: the submitted answer is not text")
        self.task = task
        self.scratchpad, self.steps, self.calculator_calls = values
        self.submitted, self.feedback = submitted, feedback

    def _start(self, task: Task) -> None:
        self.task = task
        self.scratchpad = ""
        self.steps = 0
        self.calculator_calls = 0
        self.submitted: str | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(self._pick(seed, options or {}))
        self.feedback = (options or {}).get("feedback", "strict")
        text = f"{self.task.question}\n\n{INSTRUCTIONS}"
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(
            obs, metadata={"task_id": self.task.id, "kind": self.task.kind, "question": self.task.question}
        )

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_problem(self) -> str:
        """The problem to solve."""
        return self.task.question

    @openenv.tool(annotations={"readOnlyHint": True})
    def calculator(self, expression: str) -> int | float:
        """Evaluate an arithmetic expression.

        Args:
            expression: numbers, + - * / // % ** and parentheses, the constants pi and e,
                and abs, round, min, max, sqrt, floor, ceil; e.g. "12 * (3 + 4)".
        """
        self.calculator_calls += 1
        return evaluate(expression)

    @openenv.tool
    def scratchpad_write(self, text: str) -> dict[str, int]:
        """Append a line to the scratchpad.

        Args:
            text: the note to keep.
        """
        if len(self.scratchpad) + len(text) + 1 > MAX_SCRATCHPAD_CHARS:
            raise ValueError(f"the scratchpad holds at most {MAX_SCRATCHPAD_CHARS} characters")
        self.scratchpad += text + "\n"
        return {"chars": len(self.scratchpad)}

    @openenv.tool(annotations={"readOnlyHint": True})
    def scratchpad_read(self) -> str:
        """Everything written to the scratchpad in this episode."""
        return self.scratchpad

    @openenv.tool(grades={"argument": "answer", "language": "text"})
    def submit_answer(self, answer: str) -> str:
        """Submit the final answer, a plain number; this ends the episode.

        Args:
            answer: the answer, e.g. "42" or "-3.5".
        """
        self.submitted = answer
        return f"Answer recorded: {answer}"

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        self.steps += 1
        ok = observation.result is not None and not observation.result.is_error
        return openenv.StepResult(
            observation, terminated=action.tool_name == "submit_answer" and ok, metadata={"steps": self.steps}
        )

    def state(self) -> dict[str, Any]:
        out = {
            "task_id": self.task.id,
            "kind": self.task.kind,
            "steps": self.steps,
            "calculator_calls": self.calculator_calls,
            "scratchpad_chars": len(self.scratchpad),
            "answered": self.submitted is not None,
        }
        # The answer itself only in a rich episode: strict, two answers with the same reward
        # leave the same state (RFC 0015).
        if self.feedback == "rich":
            out["submitted"] = self.submitted
        return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the math environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ap.add_argument("--tools-only", action="store_true", help="Production mode: only tools are reachable.")
    ns = ap.parse_args(argv)
    openenv.serve(
        MathEnvironment,
        ns.host,
        ns.port,
        tools_only=ns.tools_only,
        ready=lambda s: print(f"math_env serving on {s.address}", flush=True),
    )


if __name__ == "__main__":
    main()
