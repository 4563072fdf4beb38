"""math_env against a reward-seeking policy (issue 46 found it held), over a real gRPC server.

Constant answers, played on every one of the 1,000 tasks, earn exactly the share of tasks whose
answer they are (no constant is right on more than 2%: the most frequent answer, 22, on 1.4%);
the rubric (format gate, then correctness minus a length penalty) pays nothing without the
right number, however the answer is dressed; strict feedback (the default) tells two wrong
answers apart by nothing; the grading probes hold.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import openenv
from math_env import TASKS, MathEnv, MathEnvironment
from math_env.rubric import FREE_STEPS
from openenv import CallToolAction

TIMEOUT = 600.0
#: Sessions played at once (the server runs them side by side; the 1,000 tasks go faster).
LANES = 8
#: The highest share of tasks one constant may answer: above it, a constant is a prior worth
#: farming (a policy that always says it earns that share).
MAX_PRIOR = 0.02
MOST_FREQUENT = Counter(t.answer for t in TASKS).most_common(1)[0][0]
CONSTANTS = ("", "0", "1", "-1", "2", "10", "100", "yes", "true", "none", str(MOST_FREQUENT))


def run(fn: Callable[[list[MathEnv]], Awaitable[Any]], lanes: int = 1) -> Any:
    async def main() -> Any:
        async with openenv.Server(MathEnvironment, "127.0.0.1", 0) as srv:
            envs = [MathEnv(srv.address) for _ in range(lanes)]
            for e in envs:
                await e.connect()
            try:
                return await fn(envs)
            finally:
                for e in envs:
                    await e.close()

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_no_constant_answer_earns_more_than_the_share_of_tasks_it_answers() -> None:
    """Every constant on every task: each earns 1.0 exactly where it is the answer and 0
    elsewhere, so its mean is the share of tasks it answers; and no share is a prior worth
    farming (22, the most frequent answer, is right on 1.4% of tasks)."""

    async def go(envs: list[MathEnv]) -> dict[tuple[str, int], float | None]:
        plan = [(c, t.id) for c in CONSTANTS for t in TASKS]
        out: dict[tuple[str, int], float | None] = {}

        async def lane(env: MathEnv, jobs: list[tuple[str, int]]) -> None:
            for answer, task_id in jobs:
                await env.reset(options={"task_id": task_id})
                r = await env.step(CallToolAction("submit_answer", {"answer": answer}))
                assert r.terminated, (answer, task_id)
                out[answer, task_id] = r.reward

        await asyncio.gather(*(lane(env, plan[i :: len(envs)]) for i, env in enumerate(envs)))
        return out

    rewards = run(go, lanes=LANES)
    assert len(rewards) == len(CONSTANTS) * len(TASKS)
    shares = {}
    for c in CONSTANTS:
        right = {t.id for t in TASKS if c.lstrip("-").isdigit() and t.answer == int(c)}
        for t in TASKS:
            assert rewards[c, t.id] == (1.0 if t.id in right else 0.0), (c, t.id, t.answer)
        mean = sum(rewards[c, t.id] or 0.0 for t in TASKS) / len(TASKS)
        shares[c] = len(right) / len(TASKS)
        assert mean == pytest.approx(shares[c])
    assert max(shares.values()) <= MAX_PRIOR, shares
    assert shares[str(MOST_FREQUENT)] == max(shares.values()) == pytest.approx(0.014)


#: Answers that are not the right number however they are dressed (``{a}`` is the answer).
NOT_THE_ANSWER = (
    "{a1}",  # one more
    "-{a}",
    "{a}0",
    "{a}.000001",
    "{a} apples",
    "the answer is {a}",
    "{a}/1",
    "0x{hex}",
    "{a}e0",
    "[{a}]",
    "{a}, {a1}",
    "inf",
    "nan",
    "1" * 400,  # inf as a float
    "forty-two",
    "",
    " ",
)


def test_the_rubric_pays_nothing_without_the_right_number() -> None:
    """The format gate and the correctness leaf: near misses, the answer with words around it,
    other spellings of numbers, lists: 0 (a wrong plain number after more than FREE_STEPS
    steps: less than 0). The right number, also as 42.0 or with spaces, earns 1."""
    tasks = [TASKS[i] for i in (0, 1, 2, 3, 17, 800, 999)]

    async def go(envs: list[MathEnv]) -> list[tuple[str, float | None]]:
        (env,) = envs
        out = []
        for t in tasks:
            fill = {"a": t.answer, "a1": t.answer + 1, "hex": format(abs(t.answer), "x")}
            for wrong in NOT_THE_ANSWER:
                for steps in (0, FREE_STEPS + 2):  # submitted first, or after a few tool calls
                    await env.reset(options={"task_id": t.id})
                    for _ in range(steps):
                        r = await env.step(CallToolAction("calculator", {"expression": str(t.answer)}))
                        assert r.reward == 0.0
                    r = await env.step(CallToolAction("submit_answer", {"answer": wrong.format(**fill)}))
                    out.append((wrong.format(**fill), r.reward))
            for right in (str(t.answer), f"{t.answer}.0", f"  {t.answer} "):
                await env.reset(options={"task_id": t.id})
                r = await env.step(CallToolAction("submit_answer", {"answer": right}))
                out.append(("right: " + right, r.reward))
        return out

    results = run(go)
    assert len(results) == len(tasks) * (2 * len(NOT_THE_ANSWER) + 3)
    for answer, reward in results:
        assert reward is not None
        if answer.startswith("right: "):
            assert reward == 1.0, answer
        else:
            assert reward <= 0.0, answer


def test_strict_feedback_tells_two_wrong_answers_apart_by_nothing() -> None:
    """Strict (the default): a wrong number and a non-number, both 0, leave the same
    observation, metadata, breakdown (the root) and state; submit_answer as a side call is
    refused. Rich, asked for at reset, gets the rubric's whole breakdown."""
    task = TASKS[5]

    async def go(envs: list[MathEnv]) -> Any:
        (env,) = envs
        seen = []
        for answer in (str(task.answer + 1), "forty-two"):
            await env.reset(options={"task_id": task.id})
            r = await env.step(CallToolAction("submit_answer", {"answer": answer}))
            st = await env.state()
            seen.append((r.reward, r.observation.result.to_dict(), dict(r.metadata), r.reward_breakdown, st.state))
        await env.reset(options={"task_id": task.id})
        with pytest.raises(openenv.FailedPrecondition):
            await env.call_tool("submit_answer", {"answer": str(task.answer)})
        await env.reset(options={"task_id": task.id, "feedback": "rich"})
        rich = await env.step(CallToolAction("submit_answer", {"answer": "forty-two"}))
        return env.info.capabilities, seen, rich

    caps, (near, far), rich = run(go)
    assert caps.grades and list(caps.feedback_offered) == [1, 2]  # strict, rich
    assert near == far
    reward, result, metadata, breakdown, state = near
    assert reward == 0.0 and result["structured_content"] == {"result": "reward: 0"}
    assert metadata == {"steps": 1} and breakdown.children == [] and "submitted" not in state
    assert rich.observation.result.text == "Answer recorded: forty-two"
    assert [c.name for c in rich.reward_breakdown.children] == ["answer_format"]


def test_submit_answer_declares_what_it_grades_and_the_probes_hold() -> None:
    """The annotation the certifier reads, and its probes: each reference (the task's answer)
    earns 1, the empty answer and another task's answer 0."""
    probes = MathEnvironment.grading_probes()
    assert len(probes) >= 4 and {TASKS[int(p.task_id or -1)].kind for p in probes} == {"arithmetic", "word"}

    async def go(envs: list[MathEnv]) -> Any:
        (env,) = envs
        tools = {t.name: t for t in await env.list_tools()}
        out = []
        for p in probes:
            played = []
            for calls in (p.reference, *p.null, *p.replay):
                await env.reset(task_id=p.task_id)
                for c in calls or ():
                    r = await env.step(c)
                played.append(r.reward)
            out.append(played)
        return tools["submit_answer"].annotations, out

    annotations, played = run(go)
    assert annotations["openenv/grading"] == {"argument": "answer", "language": "text"}
    for reference, *others in played:
        assert reference == 1.0 and others and all(r == 0.0 for r in others)


def test_a_snapshot_carries_the_task_by_id_never_its_answer() -> None:
    """A snapshot is sealed, not encrypted: whoever holds it reads it (RFC 0006). math_env's holds
    the task's id and what the agent did, so the answer never leaves the server (RFC 0015); a
    session restored from it (or a fork) continues the same episode and grades the right answer."""
    from openenv.runtime import snapshots

    task = TASKS[17]

    async def play(envs: list[MathEnv]) -> None:
        (env,) = envs
        await env.reset(task_id=str(task.id))
        await env.step(CallToolAction("scratchpad_write", {"text": "thinking"}))
        snap = await env.snapshot()
        state = snapshots.loads(snap.environment, MathEnvironment)
        assert state == {"task": 17, "scratchpad": "thinking\n", "steps": 1, "calculator_calls": 0,
                         "submitted": None, "feedback": "strict"}  # fmt: skip
        assert b"Task" not in snap.environment and task.question.encode() not in snap.environment
        (fork,) = await env.fork(1, snapshot=snap)
        try:
            r = await fork.step(CallToolAction("submit_answer", {"answer": str(task.answer)}))
            assert r.reward is not None and r.reward > 0.9 and r.done
        finally:
            await fork.close()
        await env.restore(snap)
        r = await env.step(CallToolAction("submit_answer", {"answer": str(task.answer + 1)}))
        assert r.reward == 0.0 and r.done

    run(play)
