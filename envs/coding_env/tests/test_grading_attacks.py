"""Issue 46's coding_env finding, replayed as a reward-seeking policy would, through the
environment's own tools over a real gRPC server on loopback (RFC 0015).

The finding: ``submit`` returned how many hidden cases passed, the cases ran in a fixed order,
so an answer table keyed on a call counter was learnt in k+1 episodes; 29 of the 35 shipped
problems paid for a constant answer (up to 0.67); the breakdown's ``time_penalty`` carried the
hidden run's time (a function sleeping in proportion to its input sends out an argument's
length); ``submit`` as a side call answered as often as it was called. Here: constants earn what
the null solution earns (0), the counter-keyed table earns nothing but by chance, a strict
episode's graded step says nothing but the reward, rich feedback is there for who asks, the
probes' references earn 1.0 and their nulls 0, and the opt-in partial credit is the old shaping.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

import openenv
from coding_env import PROBLEMS, Case, CodingEnvironment, Task
from coding_env.problems import by_id
from coding_env.rubric import FREE_CHARS
from coding_env.tasks import plain
from openenv import CallToolAction
from openenv.errors import FailedPrecondition
from openenv.v1 import environment_pb2

TIMEOUT = 300.0
#: The constants a policy that does not solve tries first.
CONSTANTS: tuple[Any, ...] = (0, 1, -1, True, False, "", [], None)


def _serve(fn: Callable[[Any], Awaitable[Any]], env_cls: type[CodingEnvironment] = CodingEnvironment) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
            return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def _submit(env: Any, task_id: str, code: str, *, feedback: str | None = None) -> Any:
    options: dict[str, Any] = {"task_id": task_id}
    if feedback:
        options["feedback"] = feedback
    await env.reset(options=options)
    return await env.step(CallToolAction("submit", {"code": code}))


def _returning(entry_point: str, value: Any) -> str:
    return f"def {entry_point}(*args):\n    return {value!r}\n"


def _key(value: Any) -> str:
    return json.dumps(plain(value), sort_keys=True)


def _guesses(task: Task) -> list[Any]:
    """The constants, and what an adversary who read the task would guess: the most common
    expected value of the hidden cases (the best constant there is) and each public example's."""
    counts = Counter(_key(task.expected(c)) for c in task.hidden)
    most_common = json.loads(counts.most_common(1)[0][0])
    return [*CONSTANTS, most_common, *(task.expected(c) for c in task.public)]


def _counter_table(task: Task) -> str:
    """A function answering the n-th call with the n-th expected value of the hidden cases in
    their stored order: what k+1 episodes of pass counts taught a policy."""
    table = [task.expected(c) for c in task.hidden]
    return (
        f"_TABLE = {table!r}\n_CALLS = [0]\n"
        f"def {task.entry_point}(*args):\n"
        "    n = _CALLS[0]\n    _CALLS[0] += 1\n    return _TABLE[n % len(_TABLE)]\n"
    )


def test_no_constant_answer_earns_more_than_the_null_solution_on_any_problem() -> None:
    """On every shipped problem, functions returning 0, 1, -1, True, False, "", [], None, the
    most common expected value of its hidden cases and each public example's earn what an empty
    submission earns: 0. The reward is all or nothing, and no problem's hidden cases all share a
    value. Before, 29 of the 35 problems paid for one of the eight constants (up to 0.67), and
    all 35 for one of these guesses."""

    async def go(env: Any) -> tuple[dict[str, float], dict[str, tuple[float, str]]]:
        null: dict[str, float] = {}
        best: dict[str, tuple[float, str]] = {}
        for task in PROBLEMS:
            null[task.id] = (await _submit(env, task.id, "")).reward
            for value in _guesses(task):
                code = _returning(task.entry_point, value)
                reward = (await _submit(env, task.id, code)).reward
                if task.id not in best or reward > best[task.id][0]:
                    best[task.id] = (reward, code)
        return null, best

    null, best = _serve(go)
    assert set(null.values()) == {0.0}, null
    paid = {tid: best[tid] for tid in best if best[tid][0] > null[tid]}
    assert not paid, f"{len(paid)} of {len(PROBLEMS)} problems paid for a constant: {paid}"


def test_a_counter_keyed_answer_table_earns_nothing_with_a_fresh_order() -> None:
    """The best a policy that learnt the hidden cases' answers in their stored order can do
    with a call counter: it earns 0, submission after submission, because every submission
    gets its cases in a fresh random order. The task has 10 hidden cases with distinct
    answers: the table earns only when the order happens to be the stored one, probability
    1/10! per submission, so this test fails by chance with probability 5/10! (1.4e-6). Before,
    the order was fixed and the table earned 1.0 every time."""
    task = Task(
        "square",
        "Square a number.",
        "square",
        public=[Case((3,), 9)],
        hidden=[Case((n,), n * n) for n in (4, -7, 12, 0, 5, 31, -2, 100, 9, 13)],
    )
    served = CodingEnvironment.with_tasks([task])
    table = _counter_table(task)

    async def go(env: Any) -> list[float]:
        return [(await _submit(env, "square", table)).reward for _ in range(5)]

    rewards = _serve(go, served)
    assert rewards == [0.0] * 5, rewards


def test_a_counter_keyed_answer_table_earns_on_the_shipped_problems_only_by_chance() -> None:
    """The same table, played once on each of the 35 shipped problems (each has at least 4
    hidden cases and at least 20 distinct orders of its answers): it earns only where the
    fresh order happens to put every answer back in place, with probability at most 1/20 per
    problem, about 1.05 problems expected in all. More than 8 happens by chance with
    probability 5.4e-7 (the exact tail over the problems' probabilities). Before: all 35."""

    async def go(env: Any) -> dict[str, float]:
        return {t.id: (await _submit(env, t.id, _counter_table(t))).reward for t in PROBLEMS}

    rewards = _serve(go)
    won = sorted(tid for tid, r in rewards.items() if r > 0)
    assert len(won) <= 8, won


def test_every_shipped_problem_has_answers_a_guess_rarely_orders_right() -> None:
    """At least 4 hidden cases and at least 20 distinct orders of their answers per problem:
    a table of the right answers in a guessed order earns with probability at most 1/20, and
    no constant answers every case (the bounds the tests above rely on)."""
    for task in PROBLEMS:
        counts = Counter(_key(task.expected(c)) for c in task.hidden)
        orders = math.factorial(len(task.hidden))
        for n in counts.values():
            orders //= math.factorial(n)
        assert len(task.hidden) >= 4 and len(counts) >= 2 and orders >= 20, (task.id, len(task.hidden), orders)


def _sleeper(entry_point: str) -> str:
    """Wrong on every case, and slow in proportion to its argument's length: 0.25 s per
    character (5.25 s on reverse_string's hidden cases: under the 10 s limit, beyond the former
    4 s of free time)."""
    return f"import time\ndef {entry_point}(s):\n    time.sleep(0.25 * len(s))\n    return None\n"


def _seen(step: Any, state: Any) -> dict[str, Any]:
    """What the agent sees of a graded step and of the state after it."""
    result = step.observation.result
    breakdown = step.reward_breakdown
    return {
        "reward": step.reward,
        "terminated": step.terminated,
        "content": result.content,
        "structured": result.structured_content,
        "is_error": result.is_error,
        "metadata": step.metadata,
        "breakdown": None if breakdown is None else (breakdown.name, breakdown.score, breakdown.weight),
        "breakdown_detail": None if breakdown is None else (breakdown.reason, breakdown.children),
        "state": state.state,
        "step_count": state.step_count,
    }


def test_a_strict_episode_tells_two_wrong_submissions_apart_by_nothing() -> None:
    """Two wrong submissions on reverse_string, one sleeping 0.25 s per character of the hidden
    argument it is handed (a timing channel of the hidden run) and one not: the graded step's
    observation, metadata, breakdown and the state after it are identical. Before, the reward
    itself carried the time (the time penalty beyond 4 s), so the sleeper's step said how long
    the hidden arguments were. And ``submit`` as a side call, the pass-count oracle answered as
    often as it was called, is refused (FAILED_PRECONDITION)."""
    entry = by_id("reverse_string").entry_point

    async def go(env: Any) -> Any:
        seen = []
        for code in (_returning(entry, None), _sleeper(entry)):
            step = await _submit(env, "reverse_string", code)
            seen.append(_seen(step, await env.state()))
        await env.reset(options={"task_id": "reverse_string"})
        with pytest.raises(FailedPrecondition):
            await env.call_tool("submit", {"code": _returning(entry, "")})
        return seen

    fast, slow = _serve(go)
    assert fast == slow, (fast, slow)
    assert fast["reward"] == 0.0 and fast["terminated"]
    assert fast["structured"] == {"reward": 0} and fast["breakdown_detail"] == ("", [])
    assert set(fast["metadata"]) <= {"problem_id", "split", "entry_point", "steps"}


def test_rich_feedback_asked_for_at_reset_returns_the_pass_counts() -> None:
    """Curricula and evaluation ask for rich feedback at reset and get the environment's own
    results: hidden tests passed, the total, the load error, whether it timed out, and the whole
    breakdown. The capabilities say strict is the default and rich is offered."""
    partly_right = "def is_prime(n):\n    return n in (2, 3, 5, 7, 97)\n"  # wrong on 7919 and 1000000007

    async def go(env: Any) -> Any:
        rich = await _submit(env, "is_prime", partly_right, feedback="rich")
        strict = await _submit(env, "is_prime", partly_right)
        return env.info.capabilities, rich, strict

    caps, rich, strict = _serve(go)
    assert caps.grades and caps.feedback == environment_pb2.FEEDBACK_STRICT
    assert list(caps.feedback_offered) == [environment_pb2.FEEDBACK_STRICT, environment_pb2.FEEDBACK_RICH]
    assert rich.observation.result.data == {"passed": 5, "total": 7, "load_error": None, "timed_out": False}
    assert rich.reward == 0.0 and [c.name for c in rich.reward_breakdown.children] == ["solved"]
    assert strict.observation.result.data == {"reward": 0} and strict.reward == 0.0


def test_the_probes_references_earn_full_reward_and_their_nulls_nothing() -> None:
    """grading_probes() names problems of different kinds (lists of strings, booleans, dicts,
    floats, two arguments) with their reference solutions and two null solutions (an empty
    submission, a function returning None): played through the server, each reference earns
    1.0 and each null 0, the baseline the certifier holds every attack to."""
    probes = CodingEnvironment.grading_probes()
    assert len(probes) >= 3
    kinds = {type(by_id(p.task_id or "").expected(by_id(p.task_id or "").hidden[-1])).__name__ for p in probes}
    assert len(kinds) >= 3, kinds

    async def play(env: Any, probe: openenv.GradingProbe, calls: Sequence[CallToolAction]) -> float:
        await env.reset(options={"task_id": probe.task_id})
        step = None
        for call in calls:
            step = await env.step(call)
        assert step is not None and step.terminated
        return step.reward

    async def go(env: Any) -> list[tuple[str, float, list[float]]]:
        out = []
        for p in probes:
            assert p.reference is not None
            out.append((p.task_id, await play(env, p, p.reference), [await play(env, p, n) for n in p.null]))
        return out

    for task_id, reference, nulls in _serve(go):
        assert reference == 1.0, task_id
        assert nulls == [0.0, 0.0], (task_id, nulls)


def test_each_submission_runs_in_a_fresh_interpreter() -> None:
    """The function answers True only in an interpreter where no earlier submission ran (it
    marks the sys module): every one of three submissions earns 1.0, so no state (a counter, a
    table, a patched module) survives from one graded run to the next."""
    task = Task(
        "fresh", "Answer True.", "fresh", public=[Case((0,), True)], hidden=[Case((n,), True) for n in range(4)]
    )
    code = (
        "import sys\n_FIRST = not hasattr(sys, 'coding_env_seen')\nsys.coding_env_seen = True\n"
        "def fresh(n):\n    return _FIRST\n"
    )

    async def go(env: Any) -> list[float]:
        return [(await _submit(env, "fresh", code)).reward for _ in range(3)]

    assert _serve(go, CodingEnvironment.with_tasks([task])) == [1.0, 1.0, 1.0]


def _descendants(pid: int) -> list[int]:
    out = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in threads:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for k in kids:
            out += [k, *_descendants(k)]
    return out


def _supervisors() -> list[int]:
    """This process's sandbox supervisors (the interpreter bubblewrap starts; not bwrap itself)."""
    out = []
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"python" in os.path.basename(argv[0]) and any(a.endswith(b"supervisor.py") for a in argv):
            out.append(pid)
    return out


def test_a_sandbox_that_dies_while_grading_pays_nothing_and_ends_the_episode() -> None:
    """The sandbox's supervisor is killed (from outside, as the machine might) while a
    submission is being graded: the run did not complete, so the step pays 0 and ends the
    episode like any graded step, and in a strict episode it says nothing else. Before, the
    failure came back as an error result, the episode stayed open and submit could be called
    again. The next episode's sandbox starts afresh and grades the reference 1.0."""
    slow = "import time\ndef sum_list(xs):\n    time.sleep(2)\n    return sum(xs)\n"

    async def go(env: Any) -> Any:
        await env.reset(options={"task_id": "sum_list"})
        await env.step(CallToolAction("run_python", {"code": "pass"}))  # starts the session's sandbox
        [supervisor] = _supervisors()
        graded = asyncio.ensure_future(env.step(CallToolAction("submit", {"code": slow})))
        for _ in range(600):  # until the graded call's process exists (bounded: 30 s)
            if _descendants(supervisor) or graded.done():
                break
            await asyncio.sleep(0.05)
        assert _descendants(supervisor), "the graded call never started"
        os.kill(supervisor, signal.SIGKILL)
        killed = await graded
        after = await _submit(env, "sum_list", by_id("sum_list").reference or "")
        return killed, after

    killed, after = _serve(go)
    assert killed.terminated and killed.reward == 0.0
    assert not killed.observation.result.is_error and killed.observation.result.data == {"reward": 0}
    assert after.reward == 1.0


class PartialCoding(CodingEnvironment):
    """The opt-in: partial credit, for curricula."""

    partial_credit = True


def test_the_partial_credit_opt_in_is_the_former_shaping_and_is_advertised() -> None:
    """A class setting ``partial_credit = True`` (or ``with_tasks(..., partial_credit=True)``)
    serves the former rubric: the fraction of hidden tests passed, less 0.1 per 16,000
    characters beyond 4,000 and the time penalty; a constant earns its share (the reason it is
    not the default). The advertised rubric is the one served, for it and for the default."""
    reference = by_id("is_prime").reference or ""
    padded = reference + "#" * (FREE_CHARS + 8000 - len(reference) - 1) + "\n"  # length_penalty 0.5
    constant = _returning("is_prime", False)

    async def go(env: Any) -> Any:
        rubric = env.rubric
        out = {
            "constant": await _submit(env, "is_prime", constant, feedback="rich"),
            "padded": await _submit(env, "is_prime", padded),
            "empty": await _submit(env, "is_prime", ""),
        }
        return rubric, out

    rubric, out = _serve(go, PartialCoding)
    assert rubric == PartialCoding.rubric.spec()
    leaves = {c.name: c.weight for c in rubric.children[1].children}
    assert [c.name for c in rubric.children] == ["loads", "score"]
    assert leaves == {"tests_passed": 1.0, "length_penalty": -0.1, "time_penalty": -0.1}
    assert PartialCoding.reward_range == (-0.2, 1.0)
    assert out["constant"].reward == pytest.approx(3 / 7)  # 0, 9 and 1000000008 are not prime
    assert out["constant"].observation.result.data["passed"] == 3
    names = [c.name for c in out["constant"].reward_breakdown.children[1].children]
    assert names == ["tests_passed", "length_penalty", "time_penalty"]
    assert out["padded"].reward == pytest.approx(0.95)
    assert out["empty"].reward == 0.0
    assert CodingEnvironment.with_tasks(PROBLEMS, partial_credit=True).rubric.spec() == rubric

    async def default(env: Any) -> Any:
        return env.rubric, await _submit(env, "is_prime", constant), await _submit(env, "is_prime", padded)

    spec, const, long_right = _serve(default)
    assert spec == CodingEnvironment.rubric.spec()
    assert [c.name for c in spec.children] == ["solved", "score"]
    assert "time_penalty" not in str(spec)
    assert CodingEnvironment.reward_range == (0.0, 1.0)
    assert const.reward == 0.0 and long_right.reward == pytest.approx(0.95)
