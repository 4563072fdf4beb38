"""Every registered ``openenv/<name>`` Gymnasium id opens and steps (docs/training.md,
"Gymnasium"): importing :mod:`openenv.gym` registers one id per certified catalog entry, so each
must make, reset and step, tool and text environments included (their tool calls and results
are Dicts of ``Text`` fields, JSON documents where the contract says "any JSON"). Each entry is
served in this process (the protocol engine, no socket) and stepped with its advertised example
action or, without one, a sample of its action space; ``openenv/remote`` is made against a real
gRPC server.

Budget (not asserted): the 194 catalog ids take about 35 s of CPU in all (this file and
test_gym_video.py together: about 42 s of CPU with -n 2), most of it
importing the importers' packages (reasoning-gym, TextArena, MuJoCo, ALE); the families are
separate tests so that ``-n`` spreads them."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from openenv_testkit import server_thread

from gridworld import GridWorldEnvironment
from openenv.gym.registration import catalog_names

IDS = sorted(f"openenv/{name}" for name in catalog_names())
FAMILIES = ("ale-", "mujoco-", "gymnasium-", "reasoning-gym-", "textarena-", "openspiel-", "pettingzoo-")


def _family(env_id: str) -> str:
    name = env_id.removeprefix("openenv/")
    return next((f for f in FAMILIES if name.startswith(f)), "environments")


def _ids(family: str) -> list[str]:
    return [i for i in IDS if _family(i) == family]


def _play(env_id: str) -> None:
    env = gym.make(env_id)
    try:
        u: Any = env.unwrapped
        obs, _ = env.reset(seed=0)
        assert obs is not None
        examples = u.example_actions()
        for a in examples:
            assert a in env.action_space, (env_id, a)  # the examples are elements of the space
        action = examples[0] if examples else env.action_space.sample()
        _, reward, terminated, truncated, info = env.step(action)
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
        assert "step_count" in info
    finally:
        env.close()


def test_every_catalog_entry_is_registered() -> None:
    """The ids the tests below play are Gymnasium's registry's, all of them (at least the 193
    certified entries when this test was written)."""
    registered = sorted(i for i in gym.registry if i.startswith("openenv/") and i != "openenv/remote")
    assert registered == IDS and len(IDS) >= 193
    assert {_family(i) for i in IDS} == {*FAMILIES, "environments"}


@pytest.mark.slow
@pytest.mark.parametrize("family", [*FAMILIES, "environments"])
def test_every_registered_id_makes_resets_and_steps(family: str) -> None:
    """Each id of the family: gymnasium.make, reset, one step (the tool environments too:
    before, about 100 ids failed in make with "google.protobuf.Struct has no space")."""
    failures = {}
    for env_id in _ids(family):
        try:
            _play(env_id)
        except Exception as e:  # noqa: BLE001 - collect them all, then report
            failures[env_id] = f"{type(e).__name__}: {e}"
    assert not failures, json.dumps(failures, indent=1)


def _solve_maze(question: str) -> int:
    """The fewest steps from start to goal of reasoning-gym's maze text (breadth-first)."""
    start_c, goal_c = re.findall(r"'(.)' \((?:start|goal)\)", question)
    wall = re.search(r"'(.)' = Wall", question)
    assert wall is not None
    grid = question.split("```")[1].strip().splitlines()
    cells = {(r, c): ch for r, row in enumerate(grid) for c, ch in enumerate(row)}
    start = next(p for p, ch in cells.items() if ch == start_c)
    seen, frontier, steps = {start}, [start], 0
    while frontier:
        if any(cells[p] == goal_c for p in frontier):
            return steps
        nxt = []
        for r, c in frontier:
            for p in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if p in cells and cells[p] != wall.group(1) and p not in seen:
                    seen.add(p)
                    nxt.append(p)
        frontier, steps = nxt, steps + 1
    raise AssertionError("no path")


def test_a_tool_environment_takes_a_tool_call_and_answers_with_text() -> None:
    """reasoning-gym's maze (the docs' example): the action is a tool call whose arguments are
    a JSON document (text, or the dict itself), the observation the tool's result, its text
    content readable; the right answer is rewarded, a wrong one is not."""
    env = gym.make("openenv/reasoning-gym-maze")
    try:
        u: Any = env.unwrapped
        assert isinstance(env.action_space, gym.spaces.Dict)
        assert isinstance(env.action_space["arguments"], gym.spaces.Text)
        name = "submit_answer"
        assert name in [a["name"] for a in u.example_actions()]
        obs, _ = env.reset(seed=3)
        assert obs in env.observation_space
        question = obs["result"]["content"][0]["text"]["text"]
        obs, reward, terminated, _, _ = env.step({"name": name, "arguments": json.dumps({"answer": "999"})})
        assert reward == 0.0 and terminated and obs["name"] == name and obs in env.observation_space
        env.reset(seed=3)
        answer = str(_solve_maze(question))
        _, reward, terminated, _, _ = env.step({"name": name, "arguments": {"answer": answer}})  # the dict works too
        assert reward == 1.0 and terminated
    finally:
        env.close()


def test_openenv_remote_steps_a_served_environment() -> None:
    """The one id that is not a catalog entry: a session of a running gRPC server."""
    with server_thread(GridWorldEnvironment) as srv:
        env = gym.make("openenv/remote", url=srv.address)
        try:
            env.reset(seed=1)
            obs, reward, *_ = env.step(env.action_space.sample())
            assert obs in env.observation_space and isinstance(reward, float)
        finally:
            env.close()


def test_an_unclosed_adapter_does_not_hang_the_interpreter(tmp_path: Any) -> None:
    """A script that forgets env.close() exits: before, its in-process server's portal was
    finalised after its thread was gone and the interpreter never exited."""
    import subprocess
    import sys

    script = (
        "import gymnasium, openenv.gym\nenv = gymnasium.make('openenv/gridworld')\nenv.reset(seed=0)\nprint('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_json_text_values_keep_their_json() -> None:
    """The JSON text of a structured result parses back to the value (ASCII-escaped, compact)."""
    env = gym.make("openenv/reasoning-gym-maze")
    try:
        obs, _ = env.reset(seed=0)
        sc = obs["result"]["structured_content"]
        assert isinstance(json.loads(sc), dict) and sc.isascii()
        assert np.int64(obs["result"]["is_error"]) in (0, 1)
    finally:
        env.close()
