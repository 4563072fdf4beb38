"""Grading environments (RFC 0015) through the runtime, over real transports: what a graded step
may tell the agent.

A small quiz environment grades an answer against a hidden number and, like the environments
issue 46 found leaking, reports everything it knows: how close the answer was, the expected
value, per-check verdicts in the metadata, reasons in the breakdown. In a strict episode (the
default) none of it reaches the client but the reward; in a rich one (offered, asked for at
reset) all of it does. A grading tool is refused as a side call when strict (else it is an
oracle answered as often as it is called).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openenv_testkit import TRANSPORTS, serving

import openenv
from openenv.rubrics import Score, WeightedSum, leaf
from openenv.runtime.grading import GradingProbe, grading_spec, probes_document
from openenv.v1 import environment_pb2

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent


@leaf(minimum=0, maximum=1)
def correct(action: Any, observation: Any, env: Any) -> Score:
    if getattr(action, "tool_name", None) != "submit" or env.verdict is None:
        return Score(0.0, reason="not a submission")
    ok, distance = env.verdict
    return Score(1.0 if ok else 0.0, reason=f"off by {distance} (expected {env.secret})")


@leaf(minimum=0, maximum=1)
def effort(action: Any, observation: Any, env: Any) -> float:
    return 0.0


class Quiz(openenv.Environment):
    """Guess the hidden number (the reset's seed); everything about the guess is reported."""

    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=("steps",))
    rubric = WeightedSum([correct, effort], [1.0, 0.0])
    reward_range = (0.0, 1.0)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.secret, self.steps, self.verdict, self.level = 0, 0, None, ""

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> Any:
        self.secret, self.steps, self.verdict = 40 + (seed or 0), 0, None
        self.level = (options or {}).get("feedback", "")
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": "guess the number"}]))
        return openenv.StepResult(obs, metadata={"level": self.level})

    @openenv.tool(grades={"argument": "answer", "language": "text"})
    def submit(self, answer: str) -> dict[str, Any]:
        """Submit a guess; this ends the episode.

        Args:
            answer: the number.
        """
        if len(answer) > 20:
            raise ValueError("an answer has at most 20 characters")
        distance = abs(int(answer) - self.secret) if answer.strip().lstrip("-").isdigit() else 999
        self.verdict = (distance == 0, distance)
        return {"distance": distance, "expected": self.secret, "passed": int(distance == 0), "total": 1}

    @openenv.tool(annotations={"readOnlyHint": True})
    def hint(self) -> str:
        """A public hint."""
        return "between 40 and 50"

    def finish_tool_step(self, action: Any, observation: Any) -> openenv.StepResult:
        self.steps += 1
        done = action.tool_name == "submit" and not observation.result.is_error
        meta = {"steps": self.steps, "checks": {"exact": bool(self.verdict and self.verdict[0])}}
        if self.verdict is not None:
            meta["distance"] = self.verdict[1]
        return openenv.StepResult(observation, terminated=done, metadata=meta)

    def state(self) -> dict[str, Any]:
        return {"steps": self.steps, "submitted": self.verdict is not None}

    @classmethod
    def grading_probes(cls) -> list[GradingProbe]:
        return [
            GradingProbe(
                seed=3,
                reference=[openenv.CallToolAction("submit", {"answer": "43"})],
                null=[[{"tool": "submit", "arguments": {"answer": ""}}]],
                replay=[[{"tool": "submit", "arguments": {"answer": "44"}}]],
            )
        ]


async def _graded(env: Any, answer: str, **reset: Any) -> tuple[Any, Any]:
    await env.reset(seed=3, **reset)
    step = await env.step(openenv.CallToolAction("submit", {"answer": answer}))
    return step, await env.state()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_strict_graded_step_tells_the_reward_and_nothing_finer(transport: str) -> None:
    async with serving(transport, Quiz) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            right, _ = await _graded(env, "43")
            assert right.reward == 1.0 and right.done
            assert right.observation.result.structured_content == {"reward": 1.0}
            assert right.observation.result.text == "reward: 1"
            far, far_state = await _graded(env, "-500")
            near, near_state = await _graded(env, "44")
            # Two wrong answers, one far and one off by one: the same reward, nothing else differs.
            assert far.reward == near.reward == 0.0
            for a, b in ((far.observation.result.to_dict(), near.observation.result.to_dict()),):
                assert a == b == {"content": [{"type": "text", "text": "reward: 0"}], "structured_content":
                                  {"reward": 0.0}, "data": {"reward": 0.0}, "is_error": False}  # fmt: skip
            assert far.metadata == near.metadata == {"steps": 1}
            bd_far, bd_near = far.reward_breakdown.to_dict(), near.reward_breakdown.to_dict()
            assert bd_far == bd_near and not bd_far.get("children")
            assert not bd_far.get("reason")
            assert far_state.state == near_state.state
            assert "expected" not in json.dumps(far.observation.result.to_dict())


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_rich_feedback_is_the_environments_own_when_asked_for_at_reset(transport: str) -> None:
    async with serving(transport, Quiz) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            first = await env.reset(seed=3, options={"feedback": "rich"})
            assert first.metadata["level"] == "rich"  # the environment sees the level
            near = await env.step(openenv.CallToolAction("submit", {"answer": "44"}))
            assert near.observation.result.data == {"distance": 1, "expected": 43, "passed": 0, "total": 1}
            assert near.metadata["distance"] == 1 and near.metadata["checks"] == {"exact": False}
            assert near.reward_breakdown.children[0].reason == "off by 1 (expected 43)"
            # The level holds for one episode: the next reset without options is strict again.
            again = await env.reset(seed=3)
            assert again.metadata == {"level": "strict"}  # a reset's metadata is not a graded step's
            strict = await env.step(openenv.CallToolAction("submit", {"answer": "44"}))
            assert strict.observation.result.data == {"reward": 0.0}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_level_not_offered_is_refused_and_the_episode_does_not_start(transport: str) -> None:
    class StrictOnly(Quiz):
        grading = openenv.Grading()

    async with serving(transport, StrictOnly) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            with pytest.raises(openenv.InvalidArgument, match="not offered"):
                await env.reset(seed=3, options={"feedback": "rich"})
            with pytest.raises(openenv.FailedPrecondition):  # no episode started
                await env.step(openenv.CallToolAction("hint", {}))
            ok = await env.reset(seed=3)
            assert ok.metadata == {"level": "strict"}  # reset's own metadata is not a step's


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_grading_tool_is_no_side_call_oracle_when_strict(transport: str) -> None:
    async with serving(transport, Quiz) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            await env.reset(seed=3)
            with pytest.raises(openenv.FailedPrecondition, match="call it as a step"):
                await env.call_tool("submit", {"answer": "44"})
            assert (await env.call_tool("hint", {})).data == "between 40 and 50"  # other tools: as before
            step = await env.step(openenv.CallToolAction("hint", {}))
            assert step.observation.result.data == "between 40 and 50"  # not a grading tool: unchanged
            assert step.metadata == {"steps": 1}  # but only public metadata
            await env.reset(seed=3, options={"feedback": "rich"})
            assert (await env.call_tool("submit", {"answer": "44"})).data["distance"] == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_refused_submission_keeps_its_error(transport: str) -> None:
    """An error of a grading tool (a submission refused before any grading) passes unchanged:
    it carries nothing of the hidden data, and the agent may correct it."""
    async with serving(transport, Quiz) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            await env.reset(seed=3)
            step = await env.step(openenv.CallToolAction("submit", {"answer": "1" * 30}))
            assert step.observation.result.is_error and "at most 20 characters" in step.observation.result.text
            assert not step.done


async def test_the_capabilities_say_it_grades_and_what_feedback_is_offered() -> None:
    async with serving("grpc", Quiz) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            caps = env.info.capabilities
            assert caps.grades
            assert caps.feedback == environment_pb2.FEEDBACK_STRICT
            assert list(caps.feedback_offered) == [environment_pb2.FEEDBACK_STRICT, environment_pb2.FEEDBACK_RICH]
            tools = {t.name: t for t in await env.list_tools()}
            assert grading_spec(tools["submit"].annotations) == {"argument": "answer", "language": "text"}
            assert grading_spec(tools["hint"].annotations) is None


async def test_an_rfc_0010_grading_tool_makes_an_environment_strict_by_default() -> None:
    class Graded(openenv.Environment):
        @openenv.tool(annotations={"openenv/sandbox": {"language": "python", "argument": "code", "grades": True}})
        def submit(self, code: str) -> dict[str, Any]:
            """Grade code.

            Args:
                code: the program.
            """
            return {"passed": 3, "total": 4}

        def reset(self, **kw: Any) -> Any:
            return openenv.CallToolObservation("", openenv.ToolResult([]))

    async with serving("grpc", Graded) as (_, make):
        async with make(openenv.ToolEnvClient) as env:
            assert env.info.capabilities.grades
            assert list(env.info.capabilities.feedback_offered) == [environment_pb2.FEEDBACK_STRICT]
            await env.reset()
            step = await env.step(openenv.CallToolAction("submit", {"code": "x"}))
            assert step.observation.result.data == {"reward": None}


def test_a_malformed_grading_declaration_fails_when_the_class_is_made() -> None:
    with pytest.raises(ValueError, match="language"):
        openenv.tool(grades={"language": "cobol"})
    with pytest.raises(ValueError, match="unknown keys"):
        openenv.tool(grades={"output": "x"})
    with pytest.raises(ValueError, match="not one of its"):

        class Bad(openenv.Environment):
            @openenv.tool(grades={"argument": "code"})
            def submit(self, answer: str) -> str:
                """A tool whose declaration names another argument.

                Args:
                    answer: the answer.
                """
                return answer

    with pytest.raises(ValueError, match="must be among offers"):
        openenv.Grading(feedback="rich")
    with pytest.raises(ValueError, match="unknown feedback level"):
        openenv.Grading(offers=("strict", "verbose"))


def test_the_probes_are_printed_for_the_certifier_by_a_command() -> None:
    """``python -m openenv.runtime.grading_probes MODULE:CLASS`` (what the certifier runs in an
    image) prints the same document as the Python API; a bad factory exits 1 naming it."""
    doc = probes_document(Quiz)
    assert doc["probes"][0]["reference"] == [{"tool": "submit", "arguments": {"answer": "43"}}]
    assert doc["probes"][0]["null"] == [[{"tool": "submit", "arguments": {"answer": ""}}]]
    assert GradingProbe.from_json(doc["probes"][0]).to_json() == doc["probes"][0]
    env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-m", "openenv.runtime.grading_probes", "test_grading:Quiz"],
        capture_output=True, text=True, env=env, timeout=120, cwd=HERE,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"environment": doc["environment"], "probes": doc["probes"]}
    r = subprocess.run(
        [sys.executable, "-m", "openenv.runtime.grading_probes", "test_grading:Nope"],
        capture_output=True, text=True, env=env, timeout=120, cwd=HERE,
    )  # fmt: skip
    assert r.returncode == 1 and "Nope" in r.stderr


@pytest.mark.parametrize("path", ["ws", "binary"])
async def test_strict_feedback_holds_over_the_http_side_too(path: str) -> None:
    """OpenEnv's JSON protocol (/ws) and the binary WebSocket reach the same sessions: a graded
    step is the reward there as well, and /ws passes the reset option that asks for rich."""
    host = openenv.Host(Quiz, "127.0.0.1", 0, http_port=0)
    await host.start()
    try:
        assert host.http is not None
        url = f"http://127.0.0.1:{host.http.port}" if path == "ws" else f"ws://127.0.0.1:{host.http.port}/v1/session"
        async with openenv.ToolEnvClient(url) as env:
            await env.reset(seed=3)
            step = await env.step(openenv.CallToolAction("submit", {"answer": "44"}))
            assert step.reward == 0.0 and step.observation.result.data == {"reward": 0.0}
            assert step.metadata == {"steps": 1}
            await env.reset(seed=3, options={"feedback": "rich"})
            rich = await env.step(openenv.CallToolAction("submit", {"answer": "44"}))
            assert rich.observation.result.data["distance"] == 1
    finally:
        await host.stop(1.0)
