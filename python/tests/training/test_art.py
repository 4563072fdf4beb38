"""ART's rollout function over an openenv server (openenv.art.rollout), on CPU: the model being
trained is reached as ART reaches it, through an OpenAI client (here a real AsyncOpenAI against
the scripted model on loopback, where ART would serve vLLM), and the rollout returns what
``art.Trajectory`` takes. openpipe-art itself (Python 3.12+ for current releases; training
needs a GPU) is not installed: the trajectory is built by a stand-in factory with the same fields.

What cannot be faked: the rewards are the server's (the same tool calls replayed on fresh
sessions pay the same), right and wrong answers are told apart, and the model's turns are the
endpoint's own ``Choice`` objects, as ART's trainer needs them."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import openai
from openai.types.chat.chat_completion import Choice
from openenv_testkit import server_thread

import openenv
import openenv.art
from math_env.server import MathEnvironment
from math_env.tasks import TASKS
from openenv.harness import Script, ScriptedModel
from openenv.harness._asgi import serve_in_thread
from openenv.runtime.tools import CallToolAction


@dataclasses.dataclass
class Trajectory:
    """art.Trajectory's fields (a stand-in: openpipe-art is not installed on Python 3.11)."""

    messages_and_choices: list[Any]
    reward: float
    metrics: dict[str, Any]
    metadata: dict[str, Any]


@dataclasses.dataclass
class Model:
    """What a rollout uses of ``art.Model``: its OpenAI client and inference name."""

    base_url: str
    name: str = "scripted"

    def openai_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key="unused", max_retries=0)

    def get_inference_name(self) -> str:
        return self.name


def test_art_rollouts_over_math_env_carry_the_servers_rewards_and_the_models_choices() -> None:
    answer = str(TASKS[5].answer)  # right for task 5, wrong for task 6
    assert TASKS[6].answer != TASKS[5].answer
    steps = (
        {"tool": "get_problem", "arguments": {}},
        {"tool": "submit_answer", "arguments": {"answer": answer}},
        {"text": "Done."},
    )
    model = ScriptedModel(Script(steps))
    served = serve_in_thread(model)
    try:
        with server_thread(MathEnvironment) as srv:
            run = openenv.art.rollout(srv.address, max_turns=4, system_prompt="Use the tools.", trajectory=Trajectory)

            async def group() -> list[Trajectory]:  # what art.gather_trajectory_groups awaits
                m = Model(f"{served.url}/v1")
                return list(await asyncio.gather(run(m, {"task_id": "5"}), run(m, {"task_id": "6"})))

            right, wrong = asyncio.run(group())
            expected = []
            for task_id in ("5", "6"):
                with openenv.ToolEnvClient(srv.address).sync() as plain:
                    plain.reset(None, None, None, task_id=task_id)
                    expected.append(
                        sum(
                            float(plain.step(CallToolAction(s["tool"], s["arguments"])).reward or 0.0)
                            for s in steps[:2]
                        )
                    )
    finally:
        served.stop()
    assert [right.reward, wrong.reward] == expected and right.reward > wrong.reward
    for t in (right, wrong):
        choices = [m for m in t.messages_and_choices if isinstance(m, Choice)]
        assert [c.message.tool_calls[0].function.name for c in choices] == ["get_problem", "submit_answer"]
        roles = [m["role"] for m in t.messages_and_choices if isinstance(m, dict)]
        assert roles == ["system", "user", "tool", "tool"]
        assert t.metrics == {"steps": 2, "tool_calls": 2, "done": 1.0}
    assert right.metadata == {"task_id": "5"}
    assert model.requests == 4  # the episode ended at the submission: no third turn
