"""The healthy grading environment the ``grading_*`` mutants start from (RFC 0015), and the pieces
they swap: a seeded linear-function task, a runner and a grading tool on ``openenv.sandbox``.

Each seed picks ``f(x) = a*x + b`` (a in 2..3, b in 2..4; the statement says which); ``submit``
grades the code on three hidden cases (x = 1, 2, 3: answers from 4 to 13, never 0 or 1, so no
constant of the level's set passes one, while some number from 2 to 9 always passes the first).
The healthy grader keeps every rule of docs/protocol.md §7.1: the cases are sent in a fresh order
per submission, in lock step with nonces, to a fresh process of the session's sandbox
(``Sandbox.call_function``); the server compares the raw values; the verdict is all or nothing
and counts only when the call completed (loaded, answered every case, not timed out); strict
feedback by default (rich offered: pass counts); metadata ``steps`` alone is public; ``state()``
holds no verdict. ``run_python`` is an RFC 0010 runner. ``grading_probes()`` names three seeds
with their reference, the empty submission as null, and another seed's literal reference as
replay.

Mutants subclass :class:`Quiz` and replace one method (:meth:`Quiz.verdict`, ``grading``,
``submit``...). They are certified at the ``grading`` level only (``LEVELS``). Deterministic: a
mutant's rewards depend on the submissions only (the fresh order is random, but no mutant's
verdict depends on it: a constant answer passes the same cases in any order).
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Mapping
from typing import Any, ClassVar

import openenv
from openenv.sandbox import FunctionResult, Limits, RunResult, Sandbox

#: The levels a grading mutant is certified at (honoured by test_mutants.py).
LEVELS = ("grading",)
#: The hidden cases' arguments.
HIDDEN = (1, 2, 3)
#: Seconds a call may run: the level's "sleeps past any limit" costs this much.
WALL_S = 2.0
#: The probes' seeds (three distinct tasks).
PROBE_SEEDS = (11, 12, 13)


def task(seed: int | None) -> tuple[int, int]:
    """(a, b) of the task of ``seed``."""
    rng = random.Random(seed)
    return rng.randint(2, 3), rng.randint(2, 4)


def reference(seed: int | None) -> str:
    a, b = task(seed)
    return f"def f(x):\n    return {a} * x + {b}\n"


def _distinct_seeds() -> list[int]:
    seen, out = set(), []
    for s in PROBE_SEEDS:
        if task(s) not in seen:
            seen.add(task(s))
            out.append(s)
    return out


class Quiz(openenv.Environment):
    """Write ``f(x)``, graded on hidden cases in a sandbox (see the module's docstring)."""

    name = "quiz"
    version = "0.1.0"
    description = "Write f(x) = a*x + b; graded all or nothing on hidden cases, in a sandbox."
    deterministic = False  # tool results come from processes; no claim
    max_episode_steps = 10
    max_sessions = 4
    reward_range = (0.0, 1.0)
    grading = openenv.Grading(feedback="strict", offers=("strict", "rich"), public_metadata=("steps",))
    example_actions = (
        openenv.CallToolAction("get_problem", {}),
        openenv.CallToolAction("run_python", {"code": "print(1 + 1)"}),
        openenv.CallToolAction("submit", {"code": "def f(x):\n    return x\n"}),
    )
    limits: ClassVar[Limits] = Limits(wall_s=WALL_S, cpu_s=2)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = Sandbox(self.limits)
        self._start(options.get("seed"))

    def _start(self, seed: Any) -> None:
        self.a, self.b = task(None if seed is None else int(seed))
        self.steps = 0
        self.verdict_value: float | None = None
        self.passed = 0

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(seed)
        self.sandbox.clear()
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": self.statement()}]))
        return openenv.StepResult(obs, metadata={"entry_point": "f"})

    def statement(self) -> str:
        return f"Define f(x) returning {self.a} * x + {self.b} for an integer x. Submit with submit(code)."

    def close(self) -> None:
        self.sandbox.close()

    def expected(self, x: int) -> int:
        return self.a * x + self.b

    # -- tools

    @openenv.tool(annotations={"readOnlyHint": True})
    def get_problem(self) -> str:
        """The problem statement."""
        return self.statement()

    @openenv.tool(
        timeout_s=30.0, annotations={"openenv/sandbox": {"language": "python", "argument": "code", "output": "stdout"}}
    )
    def run_python(self, code: str) -> dict[str, Any]:
        """Run a Python script in the session's sandbox.

        Args:
            code: the script.
        """
        r: RunResult = self.sandbox.run(code)
        return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code}

    @openenv.tool(timeout_s=30.0, grades={"argument": "code", "language": "python"})
    def submit(self, code: str) -> dict[str, Any]:
        """Grade f on the hidden cases; this ends the episode.

        Args:
            code: Python source defining f.
        """
        self.verdict_value, self.passed = self.grade(code)
        return {"passed": self.passed, "total": len(HIDDEN)}

    # -- grading (what the mutants replace)

    def order(self) -> list[int]:
        """The hidden cases in the order they are sent: fresh for every submission."""
        xs = list(HIDDEN)
        random.Random(secrets.randbits(64)).shuffle(xs)
        return xs

    def grade(self, code: str) -> tuple[float, int]:
        """(reward, cases passed) of ``code``."""
        xs = self.order()
        try:
            r: FunctionResult = self.sandbox.call_function(code, "f", [[x] for x in xs])
        finally:
            self.sandbox.clear()
        ok = [c.answered and c.error is None and c.value == self.expected(x) for x, c in zip(xs, r.cases, strict=False)]
        passed = sum(ok)
        complete = r.load_error is None and not r.timed_out and len(r.cases) == len(xs)
        return self.verdict(passed if complete else 0, len(xs), r), passed

    def verdict(self, passed: int, total: int, r: FunctionResult) -> float:
        """All or nothing."""
        return 1.0 if passed == total else 0.0

    def step_metadata(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        self.steps += 1
        graded = action.tool_name == "submit" and self.verdict_value is not None
        return openenv.StepResult(
            observation,
            reward=self.verdict_value if graded else None,
            terminated=graded,
            metadata=self.step_metadata(),
        )

    def state(self) -> dict[str, Any]:
        return {"steps": self.steps, "submitted": self.verdict_value is not None}

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        seeds = _distinct_seeds()
        return [
            openenv.GradingProbe(
                seed=s,
                reference=[openenv.CallToolAction("submit", {"code": reference(s)})],
                null=[[openenv.CallToolAction("submit", {"code": ""})]],
                replay=[[openenv.CallToolAction("submit", {"code": reference(seeds[(i + 1) % len(seeds)])})]],
            )
            for i, s in enumerate(seeds)
        ]


class Scripts(openenv.Environment):
    """A workspace task: leave ``solution.py`` printing the sum of the numbers in ``data.txt``
    (contents from the seed); ``submit()`` (no argument: it grades the workspace) runs it. The
    healthy verifier runs ``python3 -I solution.py`` in the sandbox (no work tree on its path, no
    user site) with nothing the agent controls configuring it, and the server compares what it
    printed, counting it only when it exited 0 in time. Probes: the reference writes a general
    solution; the null submits the untouched workspace; the replay writes another seed's sum."""

    name = "scripts"
    version = "0.1.0"
    description = "Leave solution.py printing the sum of data.txt's numbers; graded by running it."
    deterministic = False
    max_episode_steps = 10
    max_sessions = 4
    reward_range = (0.0, 1.0)
    grading = openenv.Grading(feedback="strict", offers=("strict", "rich"), public_metadata=("steps",))
    example_actions = (
        openenv.CallToolAction("run_python", {"code": "print(open('data.txt').read())"}),
        openenv.CallToolAction("submit", {}),
    )
    limits: ClassVar[Limits] = Limits(wall_s=WALL_S, cpu_s=2)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = Sandbox(self.limits)
        self._start(options.get("seed"))

    @staticmethod
    def numbers(seed: int | None) -> list[int]:
        rng = random.Random(seed)
        return [rng.randint(10, 99) for _ in range(rng.randint(3, 6))]

    def _start(self, seed: Any) -> None:
        self.data = self.numbers(None if seed is None else int(seed))
        self.steps = 0
        self.verdict_value: float | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(seed)
        self.sandbox.clear()
        self.sandbox.run(f"open('data.txt', 'w').write({' '.join(map(str, self.data))!r})\n")
        text = "Leave solution.py in the workspace printing the sum of the integers in data.txt; then submit()."
        return openenv.StepResult(openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}])))

    def close(self) -> None:
        self.sandbox.close()

    @property
    def expected(self) -> str:
        return str(sum(self.data))

    @openenv.tool(
        timeout_s=30.0, annotations={"openenv/sandbox": {"language": "python", "argument": "code", "output": "stdout"}}
    )
    def run_python(self, code: str) -> dict[str, Any]:
        """Run a Python script in the workspace.

        Args:
            code: the script.
        """
        r: RunResult = self.sandbox.run(code)
        return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code}

    @openenv.tool(timeout_s=30.0, grades=True)
    def submit(self) -> dict[str, Any]:
        """Run solution.py and grade what it prints; this ends the episode."""
        self.verdict_value = self.grade_workspace()
        return {"solved": self.verdict_value == 1.0}

    def grade_workspace(self) -> float:
        r = self.sandbox.exec(["python3", "-I", "solution.py"])
        ok = r.exit_code == 0 and not r.timed_out and r.stdout.strip() == self.expected
        return 1.0 if ok else 0.0

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        self.steps += 1
        graded = action.tool_name == "submit" and self.verdict_value is not None
        reward = self.verdict_value if graded else None
        return openenv.StepResult(observation, reward=reward, terminated=graded, metadata={"steps": self.steps})

    def state(self) -> dict[str, Any]:
        return {"steps": self.steps, "submitted": self.verdict_value is not None}

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        submit = openenv.CallToolAction("submit", {})
        general = "open('solution.py', 'w').write('print(sum(map(int, open(\"data.txt\").read().split())))\\n')\n"

        def literal(seed: int) -> str:
            return f"open('solution.py', 'w').write('print({sum(cls.numbers(seed))})\\n')\n"

        return [
            openenv.GradingProbe(
                seed=s,
                reference=[openenv.CallToolAction("run_python", {"code": general}), submit],
                null=[[submit]],
                replay=[[openenv.CallToolAction("run_python", {"code": literal(PROBE_SEEDS[(i + 1) % 3])}), submit]],
            )
            for i, s in enumerate(PROBE_SEEDS)
        ]


class Steps(openenv.Environment):
    """An environment whose actions are not tool calls and that grades every step (RFC 0015):
    the action is ``{"answer": N}``, rewarded 1.0 when N is the seed's ``a + b``. Its probes use
    the environment's own actions (``{"action": A}``)."""

    name = "steps"
    version = "0.1.0"
    description = "Answer a + b; every step is graded."
    action_type: ClassVar[Any] = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    observation_type: ClassVar[Any] = {"type": "object", "properties": {"question": {"type": "string"}}}
    deterministic = True
    seeded = True
    max_episode_steps = 4
    reward_range = (0.0, 1.0)
    grading = openenv.Grading(feedback="strict", offers=("strict",))
    example_actions = ({"answer": 0},)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> Any:
        self.a, self.b = task(seed)
        return {"question": f"{self.a} + {self.b}"}

    def step(self, action: dict[str, Any]) -> openenv.StepResult:
        ok = action["answer"] == self.a + self.b
        return openenv.StepResult({"question": ""}, reward=1.0 if ok else 0.0, terminated=True)

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        seeds = [s for s in _distinct_seeds() if sum(task(s)) not in {sum(task(o)) for o in _distinct_seeds() if o < s}]
        return [
            openenv.GradingProbe(
                seed=s,
                reference=[{"action": {"answer": sum(task(s))}}],
                null=[[{"action": {"answer": 0}}]],
                replay=[[{"action": {"answer": sum(task(seeds[(i + 1) % len(seeds)]))}}]],
            )
            for i, s in enumerate(seeds)
        ]


def verifier_program(cases: list[int], module: str = "solution") -> str:
    """A verifier run in the sandbox, as a test runner would be (what the forgery mutants use
    instead of ``call_function``): it imports the submission, compares inside the sandbox and
    writes the verdict to ``logs/verifier/reward.json``; then prints a completion line."""
    return (
        "import json, os, sys\n"
        "sys.path.insert(0, os.getcwd())\n"
        f"import {module} as sub\n"
        f"want = json.loads({json.dumps(json.dumps(cases))})\n"
        "ok = all(sub.f(x) == y for x, y in want)\n"
        "os.makedirs('logs/verifier', exist_ok=True)\n"
        "with open('logs/verifier/reward.json', 'w') as f:\n"
        "    json.dump({'reward': 1.0 if ok else 0.0}, f)\n"
        "print('VERIFIER DONE')\n"
    )


def read_reward_file(box: Sandbox) -> float:
    """The reward ``logs/verifier/reward.json`` (or ``reward.txt``) in the workspace says, 0
    when there is none."""
    r = box.run(
        "import json, os\n"
        "v = 0.0\n"
        "try:\n"
        "    v = json.load(open('logs/verifier/reward.json'))['reward']\n"
        "except Exception:\n"
        "    try:\n"
        "        v = float(open('logs/verifier/reward.txt').read())\n"
        "    except Exception:\n"
        "        pass\n"
        "print(json.dumps(v))\n"
    )
    try:
        return float(json.loads(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return 0.0


def put_solution(box: Sandbox, code: str) -> None:
    """Write the submission to ``solution.py`` in the workspace."""
    box.run(f"open('solution.py', 'w').write({code!r})\n")


Env = Quiz
CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
