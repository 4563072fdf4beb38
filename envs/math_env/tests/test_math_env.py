"""The math reference environment over a real gRPC server on loopback: seeded tasks,
tools (calculator, scratchpad, submit), the rubric's breakdown on every step (rich feedback),
the length penalty, truncation, tools-only mode, and the image factory convention. What a
reward-seeking policy can get from it (constants, the rubric without a correct answer, strict
feedback) is in test_grading.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import openenv
from math_env import TASKS, CalculatorError, MathEnv, MathEnvironment, evaluate, sample
from math_env.rubric import FREE_STEPS, MAX_STEPS
from openenv import CallToolAction
from openenv.rubrics import Score

TIMEOUT = 60.0
ENV_DIR = Path(__file__).resolve().parents[1]


def run(fn: Callable[[MathEnv], Awaitable[Any]], options: dict[str, Any] | None = None, **server_kw: Any) -> Any:
    """Run ``fn(client)`` against a fresh in-process server, bounded by TIMEOUT."""

    async def main() -> Any:
        async with openenv.Server(MathEnvironment, "127.0.0.1", 0, **server_kw) as srv:
            async with MathEnv(srv.address, options=options) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def check_breakdown(r: openenv.StepResult) -> Score:
    """The breakdown is present, its root equals the reward, and every node adds up."""
    bd = r.reward_breakdown
    assert isinstance(bd, Score)
    assert bd.score == r.reward
    assert bd.name == "reward" and bd.children[0].name == "answer_format"
    if bd.children[0].score < 1.0:
        assert len(bd.children) == 1 and bd.score == 0.0
    else:
        total = bd.children[1]
        assert bd.score == total.score
        acc = 0.0
        for c in total.children:
            acc += c.weight * c.score
        assert total.score == acc
    return bd


# --------------------------------------------------------------------------- pure parts


def test_calculator_whitelist() -> None:
    assert evaluate("12 * (3 + 4)") == 84
    assert evaluate("7 / 2") == 3.5
    assert evaluate("-2 ** 4 + sqrt(16)") == -12.0
    assert evaluate("round(2.567, 2)") == 2.57
    for bad in (
        "__import__('os').system('true')",
        "open('x')",
        "(1).__class__",
        "[1, 2]",
        "x",
        "lambda: 1",
        "2 ^ 3",
        "1 / 0",
        "9 ** 9 ** 9",
        "10 ** 400",
        "'a' * 3",
        "1 if 1 else 2",
        "round(5, -10000)",
        "1" * 300,
    ):
        with pytest.raises(CalculatorError):
            evaluate(bad)


def test_task_sampling_is_seeded() -> None:
    assert len(TASKS) == 1000 and {t.kind for t in TASKS} == {"arithmetic", "word"}
    assert sample(7) == sample(7)
    assert len({sample(s).id for s in range(50)}) > 10  # seeds spread over the set
    assert all(sample(s, "word").kind == "word" for s in range(20))
    assert sample(task_id=5) is TASKS[5]
    for t in TASKS:
        assert isinstance(t.answer, int)
        if t.kind == "arithmetic":  # the question's expression evaluates to the answer
            assert evaluate(t.question.removeprefix("Compute ").removesuffix(".")) == t.answer


# --------------------------------------------------------------------------- over the wire


def test_info_declares_tools_and_rubric() -> None:
    async def go(env: MathEnv) -> None:
        info = env.info
        assert info.name == "math_env" and info.capabilities.tools and info.capabilities.deterministic
        assert info.capabilities.max_episode_steps == MAX_STEPS
        assert (info.capabilities.reward_min, info.capabilities.reward_max) == (-0.2, 1.0)
        spec = info.rubric
        assert (spec.name, spec.kind) == ("reward", "gate")
        assert [c.name for c in spec.children] == ["answer_format", "score"]
        ws = spec.children[1]
        assert ws.kind == "weighted_sum"
        assert [(c.name, c.weight) for c in ws.children] == [("correctness", 1.0), ("length_penalty", -0.2)]
        assert (spec.minimum, spec.maximum) == (-0.2, 1.0)
        tools = {t.name: t for t in await env.list_tools()}
        assert list(tools) == ["get_problem", "calculator", "scratchpad_write", "scratchpad_read", "submit_answer"]
        calc = tools["calculator"]
        assert calc.input_schema["required"] == ["expression"]
        assert "12 * (3 + 4)" in calc.input_schema["properties"]["expression"]["description"]
        assert calc.annotations == {"readOnlyHint": True}

    run(go)


def test_solve_with_tools_scores_one() -> None:
    """Rich feedback (asked at reset): every step carries the rubric's whole breakdown."""

    async def go(env: MathEnv) -> None:
        r = await env.reset(seed=11, options={"feedback": "rich"})
        task = sample(11)
        assert r.metadata["task_id"] == task.id and task.question in r.observation.result.text
        assert r.reward is None and r.reward_breakdown is None
        r = await env.step(CallToolAction("scratchpad_write", {"text": "plan: compute"}))
        assert r.reward == 0.0 and not r.done
        assert check_breakdown(r).reason.startswith("gate closed")
        r = await env.step(CallToolAction("calculator", {"expression": "6 * 7"}))
        assert r.observation.result.data == 42 and r.reward == 0.0
        r = await env.step(CallToolAction("submit_answer", {"answer": str(task.answer)}))
        assert r.terminated and r.reward == 1.0
        bd = check_breakdown(r)
        assert bd.find("score.correctness").score == 1.0 and bd.find("score.correctness").reason == "correct"
        assert bd.find("score.length_penalty").score == 0.0
        assert r.observation.result.text == f"Answer recorded: {task.answer}"
        st = await env.state()
        assert st.status is openenv.EpisodeStatus.TERMINATED and st.state["submitted"] == str(task.answer)
        with pytest.raises(openenv.FailedPrecondition):
            await env.step(CallToolAction("get_problem"))

    run(go)


def test_wrong_answer_bad_format_and_length_penalty() -> None:
    """Rich feedback: the gate's closed breakdown, the penalty's share."""

    async def go(env: MathEnv) -> None:
        task = sample(3)
        await env.reset(seed=3, options={"feedback": "rich"})
        r = await env.step(CallToolAction("submit_answer", {"answer": "forty-two"}))
        assert r.terminated and r.reward == 0.0
        assert len(check_breakdown(r).children) == 1  # gate closed: correctness not evaluated

        await env.reset(seed=3, options={"feedback": "rich"})
        n = FREE_STEPS + 3
        for _ in range(n - 1):
            r = await env.step(CallToolAction("scratchpad_read"))
            assert r.reward == 0.0
        r = await env.step(CallToolAction("submit_answer", {"answer": str(task.answer + 1)}))
        penalty = (n - FREE_STEPS) / (MAX_STEPS - FREE_STEPS)
        assert r.terminated and r.reward == pytest.approx(-0.2 * penalty)
        bd = check_breakdown(r)
        assert bd.find("score.correctness").score == 0.0
        assert bd.find("score.length_penalty").score == pytest.approx(penalty)

    run(go)


def test_tool_errors_and_invalid_arguments() -> None:
    async def go(env: MathEnv) -> None:
        await env.reset(seed=1)
        r = await env.step(CallToolAction("calculator", {"expression": "__import__('os')"}))
        assert r.observation.result.is_error and "unknown function" in r.observation.result.text
        assert r.step_count == 1 and not r.done
        with pytest.raises(openenv.InvalidArgument):
            await env.step(CallToolAction("calculator", {"expr": "1"}))
        with pytest.raises(openenv.NotFound):
            await env.step(CallToolAction("python", {"code": "1"}))
        assert (await env.state()).step_count == 1
        side = await env.call_tool("calculator", {"expression": "2 ** 10"})  # a side call: no step
        assert side.data == 1024 and (await env.state()).step_count == 1

    run(go)


def test_truncated_at_max_steps() -> None:
    async def go(env: MathEnv) -> None:
        await env.reset(seed=2)
        for i in range(MAX_STEPS):
            r = await env.step(CallToolAction("calculator", {"expression": f"{i} + 1"}))
        assert r.truncated and not r.terminated and r.reward == 0.0 and r.step_count == MAX_STEPS

    run(go)


def test_same_seed_same_trajectory() -> None:
    actions = [
        CallToolAction("get_problem"),
        CallToolAction("calculator", {"expression": "3 * 3"}),
        CallToolAction("submit_answer", {"answer": "9"}),
    ]

    async def episode(env: MathEnv, seed: int) -> list[Any]:
        out = [(await env.reset(seed=seed)).metadata["task_id"]]
        for a in actions:
            r = await env.step(a)
            out.append((r.observation.result.to_dict(), r.reward, r.terminated, r.reward_breakdown.to_dict()))
        return out

    async def go(env: MathEnv) -> None:
        assert await episode(env, 5) == await episode(env, 5)

    run(go)


def test_tools_only_mode() -> None:
    """Tools-only: the task from the handshake, tools as side calls; submit_answer grades, and
    a grading tool is no side call in a strict session (there is no reset to ask for rich)."""
    task = sample(task_id=42)

    async def go(env: MathEnv) -> None:
        assert env.info.capabilities.tools_only
        for call in (env.reset(), env.step(CallToolAction("get_problem")), env.state()):
            with pytest.raises(openenv.Unimplemented):
                await call
        assert (await env.call_tool("get_problem")).data == task.question
        assert (await env.call_tool("calculator", {"expression": "1 + 1"})).data == 2
        with pytest.raises(openenv.FailedPrecondition):
            await env.call_tool("submit_answer", {"answer": "1"})

    run(go, tools_only=True, options={"task_id": 42})


def test_factory_convention_serves(tmp_path: Path) -> None:
    """The image tooling and conformance read [tool.openenv] factory; `openenv serve` runs it."""
    factory = tomllib.loads((ENV_DIR / "pyproject.toml").read_text())["tool"]["openenv"]["factory"]
    assert factory == "math_env.server:MathEnvironment"
    ready, log = tmp_path / "address", tmp_path / "server.log"
    script = Path(sys.executable).parent / "openenv"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "openenv.cli"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*cmd, "serve", factory, "--port", "0", "--ready-file", str(ready), "--grace", "1"], stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"openenv serve did not start (exit {proc.poll()}):\n{log.read_text()}")
            time.sleep(0.05)
        with MathEnv(ready.read_text()).sync() as env:
            env.reset(seed=0)
            r = env.step(CallToolAction("submit_answer", {"answer": str(sample(0).answer)}))
            assert r.reward == 1.0 and r.reward_breakdown.score == 1.0
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
