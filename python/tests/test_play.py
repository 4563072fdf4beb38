"""``openenv play``: a person plays an environment in a terminal, from its schema alone.

Driven through a pseudo-terminal (pexpect), as a person would: the gridworld's ``move`` enum
is offered as numbered choices; the test walks the seeded maze to the goal and checks the
reward and return printed are the protocol's (the same seeded episode played over gRPC).
"""

from __future__ import annotations

import os
import re
import sys

import pexpect
import pytest
from openenv_testkit import REPO_ROOT

import openenv
from gridworld import Action, Move
from gridworld.maze import shortest_path

WAIT_S = 60.0
SEED = 11


def gridworld_env() -> type[openenv.Environment]:
    from gridworld.server import GridWorldEnvironment

    return GridWorldEnvironment


def _spawn(*args: str) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "openenv.cli", "play", *args],
        cwd=str(REPO_ROOT),
        encoding="utf-8",
        timeout=WAIT_S,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR", "TERM": "dumb", "PYTHONUNBUFFERED": "1"},
        dimensions=(50, 200),
    )
    return child


@pytest.mark.anyio
async def test_a_gridworld_episode_is_played_to_the_goal_in_a_terminal() -> None:
    # The protocol's episode: the moves to the goal and their rewards, over gRPC.
    async with openenv.Host(gridworld_env(), "127.0.0.1", 0) as host:
        assert host.address is not None
        async with openenv.EnvClient(host.address) as env:
            obs = (await env.reset(seed=SEED)).observation
            moves = shortest_path(list(obs.grid), (obs.agent.row, obs.agent.col), (obs.goal.row, obs.goal.col))
            rewards = [(await env.step(Action(move=m))).reward for m in moves]
    names = ["MOVE_UP", "MOVE_DOWN", "MOVE_LEFT", "MOVE_RIGHT"]  # the order the prompt numbers them

    child = _spawn("gridworld.server:GridWorldEnvironment", "--seed", str(SEED))
    try:
        child.expect(r"playing gridworld 0\.1\.0 \(session [0-9a-f]+\)")
        child.expect(r"step=0 reward=- return=0 terminated=False truncated=False")
        ret = 0.0
        for i, m in enumerate(moves):
            child.expect_exact(">")
            child.sendline("s")
            child.expect_exact("1) MOVE_UP  2) MOVE_DOWN  3) MOVE_LEFT  4) MOVE_RIGHT")
            # By number or by name, as a person would type either.
            child.sendline(str(names.index(Move.Name(m)) + 1) if i % 2 else Move.Name(m).lower())
            child.expect(r"step=(\d+) reward=(\S+) return=(\S+) terminated=(\w+) truncated=(\w+)")
            step, reward, shown_return, terminated, _ = child.match.groups()
            ret += rewards[i]
            assert int(step) == i + 1
            assert float(reward) == pytest.approx(rewards[i], abs=1e-6)
            assert float(shown_return) == pytest.approx(ret, abs=1e-5)
            assert terminated == str(i == len(moves) - 1)
        child.expect_exact("episode over")
        child.sendline("t")
        child.expect(r'"status": "TERMINATED"')
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_a_bad_answer_is_asked_again_and_a_bad_target_is_an_error() -> None:
    child = _spawn("gridworld.server:GridWorldEnvironment", "--seed", "1")
    try:
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("4) MOVE_RIGHT")
        child.sendline("9")
        child.expect(re.escape("pick 1-4 or one of: MOVE_UP, MOVE_DOWN, MOVE_LEFT, MOVE_RIGHT"))
        child.sendline("2")
        child.expect(r"step=1 reward=")
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    bad = _spawn("grpc://127.0.0.1:1", "--connect-timeout", "1")
    bad.expect(pexpect.EOF)
    bad.close()
    assert bad.exitstatus == 1
    assert "cannot connect" in (bad.before or "")
