"""SkyRL's environment interface over openenv servers (openenv.skyrl): skyrl_gym.make builds the
environment as skyrl-train's generator does (env_class from the row, env_config from the config
section, the row as extras), and an evaluation loop drives it turn by turn on CPU.

What cannot be faked: the rewards are the server's. For math_env (a catalog tool environment)
the same actions replayed through the plain client on fresh sessions give the same rewards, and
right and wrong answers are told apart; for a text environment the server itself records the
rewards it gave. skyrl-train's trainer (vLLM/FSDP workers on GPUs) is not run here: the
environment is what it calls, and that is what these tests drive."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="the skyrl extra: pip install 'protoenv[skyrl]'")

from omegaconf import OmegaConf  # noqa: E402
from openenv_testkit import server_thread  # noqa: E402

import openenv  # noqa: E402
import openenv.skyrl  # noqa: E402
from math_env.server import MathEnvironment  # noqa: E402
from math_env.tasks import TASKS  # noqa: E402
from openenv.runtime.tools import CallToolAction  # noqa: E402

PROMPT = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Solve it."}]


def _call(name: str, **arguments: Any) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _play(env: Any, prompt: list[dict[str, Any]], turns: list[str]) -> tuple[list[dict[str, Any]], list[Any]]:
    """SkyRL's generator loop with a scripted policy: init, then one step per model turn, the
    observations appended to the conversation, until done."""
    chat, _ = env.init(prompt)
    outs = []
    for text in turns:
        out = env.step(text)
        outs.append(out)
        chat = [*chat, {"role": "assistant", "content": text}, *out["observations"]]
        if out["done"]:
            break
    env.close()
    return chat, outs


def test_skyrl_evaluates_math_env_tasks_with_the_servers_rewards() -> None:
    env_id = openenv.skyrl.register()
    assert openenv.skyrl.register() == env_id  # idempotent
    with server_thread(MathEnvironment) as srv:
        config = OmegaConf.create({"url": srv.address, "max_turns": 4})
        rows = [{"task_id": str(i), "env_class": env_id} for i in (5, 6, 7, 8)]
        episodes = []
        for k, row in enumerate(rows):
            answer = TASKS[int(row["task_id"])].answer + (0 if k % 2 == 0 else 1)  # right, wrong, right, wrong
            turns = [
                _call("get_problem"),
                "I will think first.",  # no tool call: told how to make one, no step
                _call("calculator", expression="2 * 3") + _call("submit_answer", answer=str(answer)),
            ]
            env = skyrl_gym.make(row["env_class"], env_config=config, extras=row)
            assert isinstance(env, openenv.skyrl.OpenEnvTextEnv) and env.tools
            opened = srv.manager.opened_total
            chat, outs = _play(env, PROMPT, turns)
            assert srv.manager.opened_total == opened + 1  # one session per trajectory
            episodes.append((row, turns, env, chat, outs))
    with server_thread(MathEnvironment) as srv:
        for row, _turns, env, chat, outs in episodes:
            assert outs[-1]["done"] and not outs[0]["done"]
            assert TASKS[int(row["task_id"])].question in chat[1]["content"]  # the reset observation
            assert "No tool call found" in chat[5]["content"] and outs[1]["reward"] == 0.0
            # Replayed through the plain client on a fresh session: the same rewards, turn by turn.
            with openenv.ToolEnvClient(srv.address).sync() as plain:
                plain.reset(None, None, None, task_id=row["task_id"])
                replay = [float(plain.step(CallToolAction(n, a)).reward or 0.0) for n, a in env.tool_calls]
            per_turn = [replay[0], 0.0, replay[1] + replay[2]]
            assert [o["reward"] for o in outs] == env.rewards == per_turn
        returns = [sum(env.rewards) for _, _, env, _, _ in episodes]
        assert returns[0] > returns[1] and returns[2] > returns[3]  # the rubric told right from wrong
        assert [name for name, _ in episodes[0][2].tool_calls] == ["get_problem", "calculator", "submit_answer"]


def test_a_bad_tool_call_is_told_to_the_model_and_the_session_goes_on() -> None:
    with server_thread(MathEnvironment) as srv:
        env = openenv.skyrl.OpenEnvTextEnv({"url": srv.address, "max_turns": 5}, {"task_id": "5"})
        env.init(PROMPT)
        bad = env.step("<tool_call>{not json}</tool_call>" + _call("nope") + _call("calculator", expression=5))
        assert not bad["done"] and bad["reward"] == 0.0
        replies = bad["metadata"]["replies"]
        assert "invalid tool call JSON" in replies[0] and "unknown tool 'nope'" in replies[1]
        assert "not of type 'string'" in replies[2]
        good = env.step(_call("submit_answer", answer=str(TASKS[5].answer)))
        assert good["done"] and good["reward"] > 0 and good["observations"] == []
        assert env.step("anything")["done"]  # past the end: done, no step
        env.close()
    with pytest.raises(ValueError, match="URL"):
        openenv.skyrl.OpenEnvTextEnv({}, {})


class Shout(openenv.Environment):
    """A text environment (actions are strings) that records every reward it gives."""

    action_type = str
    observation_type = str
    given: ClassVar[list[float]] = []
    lock = threading.Lock()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> str:
        return "Shout something."

    def step(self, action: str) -> openenv.StepResult:
        letters = [c for c in action if c.isalpha()]
        share = sum(c.isupper() for c in letters) / len(letters) if letters else 0.0
        with self.lock:
            Shout.given.append(share)
        return openenv.StepResult(f"You said {len(action)} characters.", reward=share)


def test_a_text_environment_steps_with_the_models_text_and_the_servers_rewards() -> None:
    Shout.given.clear()
    env_id = openenv.skyrl.register()
    with server_thread(Shout) as srv:
        got = []
        for turns in (["HELLO there", "ALL CAPS"], ["quiet", "Mixed Case"]):
            env = skyrl_gym.make(env_id, env_config={"url": srv.address, "max_turns": 2}, extras={})
            assert not env.tools
            chat, outs = _play(env, [{"role": "user", "content": "Go."}], turns)
            assert (
                chat[0]["content"] == "Go.\nShout something."
                and chat[2]["content"] == f"You said {len(turns[0])} characters."
            )
            assert [o["done"] for o in outs] == [False, True]  # max_turns
            got += [o["reward"] for o in outs]
    assert got == Shout.given and len(set(got)) > 1


def test_the_skyrl_example_solves_arithmetic_and_fails_word_problems() -> None:
    """examples/skyrl_math.py's evaluation (what docs/training.md tells a reader to run): its rule
    policy computes "Compute ..." questions with the calculator and submits 0 for word problems,
    so the server's rubric pays the arithmetic tasks (even ids of the test split) and not the rest."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "skyrl_math.py"
    spec = importlib.util.spec_from_file_location("skyrl_math_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with server_thread(MathEnvironment) as srv:
        rows = example.evaluate(srv.address, 4)
    assert [r["task_id"] for r in rows] == ["800", "801", "802", "803"]
    kinds = [TASKS[int(r["task_id"])].kind for r in rows]
    assert [r["return"] > 0 for r in rows] == [k == "arithmetic" for k in kinds]
