"""The gridworld reference environment over a real gRPC server on loopback.

One server process per module (the ``gridworld-server`` console script, port 0); every
test opens its own sessions, so tests do not share episode state.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pool, json_format, message_factory

import openenv
from gridworld import Action, GridWorldEnv, Move, Observation, State
from gridworld.v1 import gridworld_pb2

MOVES = (Move.MOVE_UP, Move.MOVE_DOWN, Move.MOVE_LEFT, Move.MOVE_RIGHT)
DELTA = {Move.MOVE_UP: (-1, 0), Move.MOVE_DOWN: (1, 0), Move.MOVE_LEFT: (0, -1), Move.MOVE_RIGHT: (0, 1)}
REVERSE = {
    Move.MOVE_UP: Move.MOVE_DOWN,
    Move.MOVE_DOWN: Move.MOVE_UP,
    Move.MOVE_LEFT: Move.MOVE_RIGHT,
    Move.MOVE_RIGHT: Move.MOVE_LEFT,
}
TIMEOUT = 30.0  # bound on every test's client work


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gridworld server started with its console script, stopped with SIGTERM."""
    tmp = tmp_path_factory.mktemp("gridworld")
    ready, log = tmp / "address", tmp / "server.log"
    script = Path(sys.executable).parent / "gridworld-server"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "gridworld.server"]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--port", "0", "--ready-file", str(ready)], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gridworld-server did not start (exit {proc.poll()}):\n{log.read_text()}")
            time.sleep(0.05)
        yield ready.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def client(url: str, **kwargs: Any) -> GridWorldEnv:
    return GridWorldEnv(url, timeout=10.0, connect_timeout=10.0, **kwargs)


def cell(pos: gridworld_pb2.Position) -> tuple[int, int]:
    return pos.row, pos.col


def plan(grid: list[str], start: tuple[int, int], goal: tuple[int, int]) -> list[Move]:
    """Shortest path by BFS on the observation grid (independent of gridworld.maze)."""
    prev: dict[tuple[int, int], tuple[tuple[int, int], Move] | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            break
        for move, (dr, dc) in DELTA.items():
            nxt = (here[0] + dr, here[1] + dc)
            if nxt not in prev and grid[nxt[0]][nxt[1]] != "#":
                prev[nxt] = (here, move)
                queue.append(nxt)
    moves: list[Move] = []
    here = goal
    while prev[here] is not None:
        here, move = prev[here]  # type: ignore[misc]
        moves.append(move)
    return moves[::-1]


def blocked(obs: Observation) -> list[Move]:
    r, c = cell(obs.agent)
    return [m for m, (dr, dc) in DELTA.items() if obs.grid[r + dr][c + dc] == "#"]


async def trajectory(url: str, seed: int, moves: list[Move]) -> list[tuple[bytes, Any, bool, bool]]:
    out = []
    async with client(url) as env:
        r = await env.reset(seed=seed)
        out.append((r.observation.SerializeToString(deterministic=True), r.reward, r.terminated, r.truncated))
        for m in moves:
            r = await env.step(Action(move=m))
            out.append((r.observation.SerializeToString(deterministic=True), r.reward, r.terminated, r.truncated))
            if r.done:
                break
    return out


# --------------------------------------------------------------------------- description


def test_info_declares_typed_protocol_first_environment(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            info = env.info
            assert info.name == "gridworld"
            assert info.action.message_type == "gridworld.v1.Action"
            assert info.observation.message_type == "gridworld.v1.Observation"
            assert info.state.message_type == "gridworld.v1.State"
            assert [f.name for f in info.descriptors.file] == ["gridworld/v1/gridworld.proto"]
            cap = info.capabilities
            assert cap.deterministic and not cap.tools and not cap.auto_reset
            assert cap.max_episode_steps == 100
            assert (cap.reward_min, cap.reward_max) == pytest.approx((-0.11, 1.09))
            examples = [Action.FromString(e.message.value) for e in info.action.examples]
            assert sorted(e.move for e in examples) == sorted(MOVES)

    run(go())


# --------------------------------------------------------------------------- determinism


def test_same_seed_and_actions_give_the_same_trajectory(url: str) -> None:
    moves = random.Random(1).choices(MOVES, k=60)

    async def go() -> None:
        a, b = await asyncio.gather(trajectory(url, 1234, moves), trajectory(url, 1234, moves))
        assert len(a) > 10
        assert a == b

    run(go())


def test_unseeded_reset_records_its_seed_and_the_seed_replays_the_maze(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            first = await env.reset()
            seed = (await env.state()).state.seed
            await env.reset()
            assert (await env.state()).state.seed != seed  # a fresh seed per unseeded reset
        async with client(url) as env:
            again = await env.reset(seed=seed)
        assert again.observation == first.observation

    run(go())


def test_different_seeds_give_different_mazes(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            grids = {tuple((await env.reset(seed=s)).observation.grid) for s in range(6)}
        assert len(grids) > 1

    run(go())


# --------------------------------------------------------------------------- dynamics


def test_walking_the_bfs_path_reaches_the_goal_and_terminates(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            r = await env.reset(seed=99)
            obs = r.observation
            assert r.reward is None and not r.done
            path = plan(list(obs.grid), cell(obs.agent), cell(obs.goal))
            assert path and r.metadata["distance_to_goal"] == len(path)
            rewards = []
            for i, move in enumerate(path, 1):
                r = await env.step(Action(move=move))
                rewards.append(r.reward)
                assert r.step_count == i and not r.truncated
                assert r.terminated == (i == len(path))
                assert r.observation.bumped is False
            assert cell(r.observation.agent) == cell(obs.goal)
            assert rewards[:-1] == pytest.approx([0.09] * (len(path) - 1))
            assert rewards[-1] == pytest.approx(1.09)
            st = await env.state()
            assert st.status is openenv.EpisodeStatus.TERMINATED
            assert st.state.total_reward == pytest.approx(sum(rewards))
            with pytest.raises(openenv.FailedPrecondition):
                await env.step(Action(move=path[0]))

    run(go())


def test_episode_is_truncated_at_the_step_limit(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            obs = (await env.reset(seed=5)).observation
            walls = blocked(obs)
            if walls:  # bump into the same wall forever
                moves = [walls[0], walls[0]]
            else:  # step away from the goal and back, forever
                r, c = cell(obs.agent)
                away = next(m for m in MOVES if (r + DELTA[m][0], c + DELTA[m][1]) != cell(obs.goal))
                moves = [away, REVERSE[away]]
            limit = env.info.capabilities.max_episode_steps
            for i in range(1, limit + 1):
                r = await env.step(Action(move=moves[i % 2]))
                assert not r.terminated
                assert r.truncated == (i == limit), f"step {i}"
            st = await env.state()
            assert (st.status, st.step_count) == (openenv.EpisodeStatus.TRUNCATED, limit)
            with pytest.raises(openenv.FailedPrecondition):
                await env.step(Action(move=moves[0]))
            r = await env.reset(seed=5)  # a new episode starts normally
            assert r.step_count == 0 and not r.done

    run(go())


def test_walls_block_the_agent(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            for seed in range(50):
                obs = (await env.reset(seed=seed)).observation
                if blocked(obs):
                    break
            else:
                pytest.fail("no start next to a wall in 50 seeds")
            wall = blocked(obs)[0]
            r = await env.step(Action(move=wall))
            assert r.observation.bumped is True
            assert cell(r.observation.agent) == cell(obs.agent)
            assert list(r.observation.grid) == list(obs.grid)
            assert r.reward == pytest.approx(-0.01)
            assert r.step_count == 1 and not r.done
            free = next(m for m in MOVES if m not in blocked(obs))
            r = await env.step(Action(move=free))
            assert r.observation.bumped is False
            dr, dc = DELTA[free]
            assert cell(r.observation.agent) == (obs.agent.row + dr, obs.agent.col + dc)

    run(go())


def test_invalid_move_is_invalid_argument_and_the_session_survives(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            obs = (await env.reset(seed=3)).observation
            for bad in (Move.MOVE_UNSPECIFIED, 42):
                with pytest.raises(openenv.InvalidArgument) as err:
                    await env.step(Action(move=bad))
                assert err.value.code is openenv.ErrorCode.INVALID_ARGUMENT and not err.value.fatal
            st = await env.state()
            assert (st.step_count, st.status) == (0, openenv.EpisodeStatus.RUNNING)
            assert cell(st.state.agent) == cell(obs.agent)
            r = await env.step(Action(move=MOVES[0]))
            assert r.step_count == 1

    run(go())


def test_state_is_the_typed_state_message(url: str) -> None:
    async def go() -> None:
        async with client(url) as env:
            st = await env.state()
            assert st.status is openenv.EpisodeStatus.NOT_STARTED and st.state is None
            r = await env.reset(seed=11, options={"size": 11})
            st = await env.state()
            assert isinstance(st.state, State)
            assert st.status is openenv.EpisodeStatus.RUNNING and st.episode_id == r.episode_id
            assert (st.state.seed, st.state.height, st.state.width) == (11, 11, 11)
            assert len(r.observation.grid) == 11 and {len(row) for row in r.observation.grid} == {11}
            assert cell(st.state.agent) == cell(r.observation.agent)
            assert cell(st.state.goal) == cell(r.observation.goal)
            assert st.state.total_reward == 0.0
            s1 = await env.step(Action(move=MOVES[0]))
            s2 = await env.step(Action(move=MOVES[3]))
            st = await env.state()
            assert st.step_count == 2
            assert st.state.total_reward == pytest.approx(s1.reward + s2.reward)
            assert cell(st.state.agent) == cell(s2.observation.agent)

    run(go())


def test_size_options_at_handshake_and_reset(url: str) -> None:
    async def go() -> None:
        async with client(url, options={"height": 7, "width": 13}) as env:
            grid = (await env.reset(seed=1)).observation.grid
            assert (len(grid), len(grid[0])) == (7, 13)
            for bad in ({"size": 8}, {"size": 3}, {"width": "9"}, {"colour": "red"}):
                with pytest.raises(openenv.InvalidArgument):
                    await env.reset(seed=1, options=bad)
            assert len((await env.reset(seed=1)).observation.grid) == 7  # session default kept
        with pytest.raises(openenv.InvalidArgument) as err:
            async with client(url, options={"size": 4}):
                pass
        assert err.value.fatal  # a bad handshake option ends the session

    run(go())


# --------------------------------------------------------------------------- no stubs


class _RawClient(openenv.EnvClient):
    """A plain client (no declared types) that keeps the raw observation ``Any``."""

    raw: list[Any]

    def parse_result(self, ts: Any) -> openenv.StepResult:
        self.raw.append(ts.observation.message)
        return super().parse_result(ts)


def test_plain_client_decodes_with_the_advertised_descriptors(url: str) -> None:
    async def go() -> None:
        async with client(url) as typed:
            want = await typed.reset(seed=21)
            want_step = await typed.step(Action(move=Move.MOVE_RIGHT))
        env = _RawClient(url, timeout=10.0, connect_timeout=10.0)
        env.raw = []
        async with env:
            info = env.info
            pool = descriptor_pool.DescriptorPool()  # fresh: knows nothing but what the server sent
            for f in info.descriptors.file:
                pool.Add(f)
            obs_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(info.observation.message_type))
            act_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(info.action.message_type))
            assert obs_cls is not Observation and act_cls is not Action
            await env.reset(seed=21)
            right = pool.FindEnumTypeByName("gridworld.v1.Move").values_by_name["MOVE_RIGHT"].number
            r = await env.step(act_cls(move=right))  # an action built from descriptors only
            decoded = []
            for raw in env.raw:
                msg = obs_cls()
                assert raw.Unpack(msg)
                decoded.append(msg)
        for msg, typed_result in zip(decoded, (want, want_step), strict=True):
            t = typed_result.observation
            assert (msg.agent.row, msg.agent.col, msg.goal.row, msg.goal.col) == (*cell(t.agent), *cell(t.goal))
            assert list(msg.grid) == list(t.grid) and msg.bumped == t.bumped
        assert r.reward == want_step.reward and r.step_count == 1

    run(go())


_NO_STUBS_CLIENT = """
import sys
sys.modules["gridworld"] = None  # this process cannot import the gridworld package
import asyncio, json, openenv
from google.protobuf import descriptor_pool, json_format

async def main(url):
    async with openenv.EnvClient(url, timeout=10, connect_timeout=10) as env:
        r = await env.reset(seed=21)
        obs = r.observation
        assert obs.DESCRIPTOR.file.pool is not descriptor_pool.Default()
        st = (await env.state()).state
        print(json.dumps({"type": obs.DESCRIPTOR.full_name,
                          "obs": json_format.MessageToDict(obs, preserving_proto_field_name=True),
                          "state": json_format.MessageToDict(st, preserving_proto_field_name=True)}))

asyncio.run(main(sys.argv[1]))
"""


def test_client_process_without_gridworld_stubs_decodes_typed_observations(url: str) -> None:
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR"}
    out = subprocess.run(
        [sys.executable, "-c", _NO_STUBS_CLIENT, url], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)

    async def typed() -> tuple[Observation, State]:
        async with client(url) as e:
            r = await e.reset(seed=21)
            return r.observation, (await e.state()).state

    obs, st = run(typed())
    assert got["type"] == "gridworld.v1.Observation"
    assert got["obs"] == json_format.MessageToDict(obs, preserving_proto_field_name=True)
    assert got["state"] == json_format.MessageToDict(st, preserving_proto_field_name=True)
