"""Multi-agent worlds (RFC 0012, docs/multiagent.md) over real sockets.

Tic-tac-toe is played agent vs agent by two separate clients (one in another process, over the
binary WebSocket; one here over gRPC) and by one self-play client; rock-paper-scissors steps
jointly across two clients; joins, leaves and their refusals; what a session may see; OpenEnv's
JSON frames carry a self-play session. Every wait is bounded only as a hang guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openenv_testenvs import Counter
from openenv_testkit import wait_until

import openenv
import openenv.testing
from openenv.games import HighCard, RockPaperScissors, TicTacToe
from openenv.rubrics import Score
from openenv.runtime.multiagent import multi_agent_spec
from openenv.v1 import multiagent_pb2

pytestmark = pytest.mark.anyio

WAIT = 60.0
X_WINS = {"x": [0, 1, 2], "o": [3, 4]}  # x takes the top row on its third move


@contextlib.asynccontextmanager
async def hosted(factory: Any, **kwargs: Any) -> AsyncIterator[openenv.Host]:
    """gRPC and the HTTP side (OpenEnv's /ws, the binary WebSocket /v1/session) on port 0."""
    host = openenv.Host(factory, "127.0.0.1", 0, http_port=0, **kwargs)
    await asyncio.wait_for(host.start(), WAIT)
    try:
        yield host
    finally:
        await asyncio.wait_for(host.stop(1.0), WAIT)


def binary_url(host: openenv.Host) -> str:
    return f"ws://127.0.0.1:{host.http.port}/v1/session"


async def play_one_side(env: openenv.EnvClient, moves: list[int]) -> openenv.StepResult[Any]:
    """The loop of a client acting for one agent: wait for its turn, move, until the end."""
    (me,) = env.world.agent_ids
    r = await env.reset()
    moves = list(moves)
    while True:
        if not r.done and me not in r.to_act:
            r = await env.observe(wait=True)
        if r.done:
            return r
        assert r.to_act == [me] and me in r.agents and len(r.agents) == 1
        r = await env.step(moves.pop(0))


async def test_self_play_tic_tac_toe_one_client() -> None:
    async with hosted(TicTacToe) as host, openenv.EnvClient(host.address) as env:
        assert env.multi_agent is not None and env.multi_agent.mode == multiagent_pb2.TURN_MODE_TURN_BASED
        assert [a.id for a in env.multi_agent.agents] == ["x", "o"] and env.multi_agent.reward_sum == 0.0
        assert list(env.world.agent_ids) == ["x", "o"] and env.world.owner
        r = await env.reset()
        assert r.to_act == ["x"] and set(r.agents) == {"x", "o"}
        order = [("x", 0), ("o", 3), ("x", 1), ("o", 4), ("x", 2)]
        for n, (agent, cell) in enumerate(order):
            assert r.to_act == [agent]
            with pytest.raises(openenv.FailedPrecondition, match="not to act"):
                await env.step(8, agent_id="o" if agent == "x" else "x")  # out of turn: refused
            if n == 1:
                with pytest.raises(openenv.InvalidArgument, match="not free"):
                    await env.step(0)  # illegal: rejected, the same agent still to act
            r = await env.step(cell)
            assert r.step_count == n + 1
        assert r.done and r.terminated and r.to_act == []
        assert {a: s.reward for a, s in r.agents.items()} == {"x": 1.0, "o": -1.0}
        assert all(s.terminated for s in r.agents.values()) and r.metadata == {"winner": "x"}
        st = await env.state()  # a session acting for every agent reads the world's state
        assert st.status == openenv.EpisodeStatus.TERMINATED and st.state["board"][:3] == ["x", "x", "x"]
        with pytest.raises(openenv.FailedPrecondition, match="over"):
            await env.step(5)
        r = await env.reset()  # a new episode: rewards were told once, not again
        assert r.to_act == ["x"] and all(s.reward is None for s in r.agents.values())


async def test_two_clients_play_agent_vs_agent_across_processes() -> None:
    """x plays here over gRPC; o plays in another process over the binary WebSocket."""
    async with hosted(TicTacToe) as host, openenv.EnvClient(host.address, agent_ids=["x"]) as x:
        script = textwrap.dedent(
            f"""
            import asyncio, json, openenv
            async def main():
                async with openenv.EnvClient({binary_url(host)!r}, join_token={x.world.join_token!r}) as o:
                    assert list(o.world.agent_ids) == ["o"] and not o.world.owner
                    seen, moves = [], [3, 4]
                    r = await o.reset()
                    while not r.done:
                        if "o" not in r.to_act:
                            r = await o.observe(wait=True)
                            continue
                        seen.append(sorted(r.agents))
                        r = await o.step(moves.pop(0))
                    st = await o.state()
                    print(json.dumps({{"reward": r.agents["o"].reward, "seen": seen, "state": st.state,
                                      "done": r.done, "board": r.agents["o"].observation["board"]}}))
            asyncio.run(main())
            """
        )
        other = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            r = await asyncio.wait_for(play_one_side(x, X_WINS["x"]), WAIT)
            out, err = await asyncio.wait_for(other.communicate(), WAIT)
        finally:
            if other.returncode is None:
                other.kill()
                await other.wait()
        assert other.returncode == 0, err.decode()
        import json

        theirs = json.loads(out.decode().strip().splitlines()[-1])
        assert r.done and set(r.agents) == {"x"} and r.agents["x"].reward == 1.0
        assert theirs["reward"] == -1.0 and theirs["done"] and theirs["seen"] == [["o"], ["o"]]
        assert theirs["state"] is None  # the whole world's state is not for a session acting for one agent
        assert theirs["board"][:3] == [2, 2, 2]  # o sees x's row as the opponent's marks


class NoScissorsForPlayer1(RockPaperScissors):
    """Rock-paper-scissors where player_1 may not throw scissors: a joint action the rules refuse."""

    def step(self, actions: Any) -> Any:
        if actions["player_1"] == 2:
            raise openenv.InvalidAction("player_1 may not throw scissors")
        return super().step(actions)


async def test_simultaneous_steps_gather_both_clients() -> None:
    async with hosted(NoScissorsForPlayer1) as host:
        async with (
            openenv.EnvClient(host.address, agent_ids=["player_0"]) as a,
            openenv.EnvClient(binary_url(host), join_token=a.world.join_token) as b,
        ):
            assert b.multi_agent is not None and b.multi_agent.mode == multiagent_pb2.TURN_MODE_SIMULTANEOUS
            await a.reset()
            await b.reset()
            totals = {"player_0": 0.0, "player_1": 0.0}
            for throws in ((0, 1), (2, 1), (1, 1)):  # paper beats rock, scissors beat paper, a tie
                ra, rb = await asyncio.wait_for(asyncio.gather(a.step(throws[0]), b.step(throws[1])), WAIT)
                assert ra.step_count == rb.step_count and set(ra.agents) == {"player_0"}
                totals["player_0"] += ra.agents["player_0"].reward or 0.0
                totals["player_1"] += rb.agents["player_1"].reward or 0.0
                assert rb.agents["player_1"].observation["opponent_last"] == throws[0]
            assert ra.done and rb.done and totals == {"player_0": 0.0, "player_1": 0.0}
            await a.reset()
            await b.reset()
            with pytest.raises(openenv.DeadlineExceeded, match="withdrawn"):  # b never acts
                await a.step(0, step_timeout=0.2)
            refused = await asyncio.wait_for(asyncio.gather(a.step(0), b.step(2), return_exceptions=True), WAIT)
            assert all(isinstance(e, openenv.InvalidArgument) and "scissors" in e.message for e in refused)
            ra, rb = await asyncio.wait_for(asyncio.gather(a.step(0), b.step(0)), WAIT)
            assert ra.step_count == 1 and ra.agents["player_0"].reward == 0.0


async def test_self_play_simultaneous_takes_joint_actions() -> None:
    async with openenv.testing.InProcessServer(RockPaperScissors) as server, server.client() as env:
        await env.reset()
        with pytest.raises(openenv.InvalidArgument, match="several"):
            await env.step(0)  # which agent's?
        with pytest.raises(openenv.InvalidArgument, match="missing"):
            await env.step_agents({"player_0": 0})
        r = await env.step_agents({"player_0": 1, "player_1": 0})
        assert {a: s.reward for a, s in r.agents.items()} == {"player_0": 1.0, "player_1": -1.0}


class SelfPlayOnly(TicTacToe):
    joinable = False


async def test_observe_waits_until_its_turn_or_its_deadline() -> None:
    async with hosted(TicTacToe) as host:
        async with (
            openenv.EnvClient(host.address, agent_ids=["x"]) as x,
            openenv.EnvClient(host.address, join_token=x.world.join_token) as o,
        ):
            await x.reset()
            r = await o.reset()
            assert r.to_act == ["x"]
            with pytest.raises(openenv.DeadlineExceeded):  # x has not moved: nothing for o yet
                await o.observe(wait=True, wait_timeout=0.0)
            waiting = asyncio.ensure_future(o.observe(wait=True))
            await x.step(4)
            r = await asyncio.wait_for(waiting, WAIT)
            assert r.to_act == ["o"] and r.agents["o"].observation["board"][4] == 2


async def test_joins_leaves_and_their_refusals() -> None:
    async with hosted(TicTacToe) as host:
        url = host.address
        with pytest.raises(openenv.NotFound):
            await openenv.EnvClient(url, join_token="no-such-world").connect()
        with pytest.raises(openenv.InvalidArgument, match="unknown agents"):
            await openenv.EnvClient(url, agent_ids=["z"]).connect()
        async with openenv.EnvClient(url, agent_ids=["x"]) as x:
            token = x.world.join_token
            with pytest.raises(openenv.FailedPrecondition, match="another session"):
                await openenv.EnvClient(url, join_token=token, agent_ids=["x"]).connect()
            o = await openenv.EnvClient(url, join_token=token).connect()
            assert list(o.world.agent_ids) == ["o"] and o.world.world_id == x.world.world_id
            with pytest.raises(openenv.FailedPrecondition, match="none is left"):
                await openenv.EnvClient(url, join_token=token).connect()
            await x.reset()
            await x.step(4)
            with pytest.raises(openenv.PermissionDenied):
                await x.step(0, agent_id="o")
            await o.close()  # o leaves mid-episode: the world waits for another o
            o2 = await openenv.EnvClient(url, join_token=token).connect()
            r = await o2.reset()  # never saw this episode: it is returned, at o's turn
            assert r.to_act == ["o"] and r.agents["o"].observation["board"][4] == 2
            await x.close()  # the owner leaves: o2 owns the world now
            r = await o2.observe()
            assert r.step_count == 1
            r = await o2.reset()  # the owner's reset starts a new episode
            assert r.step_count == 0 and r.to_act == ["x"]
            await o2.close()
        async with openenv.EnvClient(url) as again:  # every world closed: a fresh one
            assert list(again.world.agent_ids) == ["x", "o"]
        with pytest.raises(openenv.NotFound):  # the closed world's token is gone
            await openenv.EnvClient(url, join_token=token).connect()
    async with openenv.testing.InProcessServer(SelfPlayOnly) as server:
        with pytest.raises(openenv.FailedPrecondition, match="not joinable"):
            await server.client(agent_ids=["x"]).connect()
        async with server.client() as alone:
            assert alone.world.join_token == "" and alone.multi_agent is not None and not alone.multi_agent.joinable
    async with openenv.testing.InProcessServer(Counter) as server:
        with pytest.raises(openenv.FailedPrecondition, match="not a multi-agent"):
            await server.client(agent_ids=["x"]).connect()
        async with server.client() as plain:
            await plain.reset()
            with pytest.raises(openenv.FailedPrecondition, match="multi-agent"):
                await plain.observe()
            with pytest.raises(openenv.InvalidArgument, match="multi-agent"):
                await plain.step(1, agent_id="x")


async def test_hidden_cards_reach_only_their_agent() -> None:
    async with hosted(HighCard) as host:
        async with (
            openenv.EnvClient(host.address, agent_ids=["first"]) as a,
            openenv.EnvClient(host.address, join_token=a.world.join_token) as b,
        ):
            ra = await a.reset(seed=5)
            rb = await b.reset()
            mine, theirs = ra.agents["first"].observation, rb.agents["second"].observation
            assert mine["opponent_card"] == 0 and theirs["opponent_card"] == 0 and mine["card"] != theirs["card"]
            await a.step("bet")
            rb = await b.observe(wait=True)
            assert set(rb.agents) == {"second"} and rb.agents["second"].observation["opponent_card"] == 0
            rb = await b.step("call")
            ra = await a.observe(wait=True)
            assert ra.done and ra.agents["first"].observation["opponent_card"] == theirs["card"]
            assert ra.agents["first"].reward == -(rb.agents["second"].reward or 0.0) != 0


async def test_openenv_json_frames_carry_a_self_play_session() -> None:
    async with hosted(TicTacToe) as host, openenv.EnvClient(host.http_url) as env:
        r = await env.reset()
        assert r.observation["action_mask"] == [1] * 9  # x's view, x to act
        for cell in (0, 3, 1, 4):
            r = await env.step(cell)
            assert not r.done
        r = await env.step(2)
        assert r.done and r.reward == 1.0  # the acting agent's


def test_sync_client_plays_self_play() -> None:
    with openenv.testing.sync_client(TicTacToe) as env:
        r = env.reset()
        for cell in (0, 3, 1, 4, 2):
            r = env.step(cell)
        assert r.done and env.world.owner and env.multi_agent is not None
        assert env.observe().agents["o"].terminated


def test_declarations_are_checked() -> None:
    class NoAgents(openenv.MultiAgentEnvironment):
        pass

    class Twice(openenv.MultiAgentEnvironment):
        agents = ("a", "a")

    class BadPolicy(openenv.MultiAgentEnvironment):
        agents = ("a",)
        illegal_actions = "ignore"

    for cls in (NoAgents, Twice, BadPolicy):
        with pytest.raises(ValueError):
            multi_agent_spec(cls)


class ScoredRounds(RockPaperScissors):
    """Rock-paper-scissors with a rubric breakdown per agent, agent metadata, and a world step
    limit below the game's rounds (the limit truncates every agent)."""

    max_episode_steps = 2

    def step(self, actions: Any) -> Any:
        out = super().step(actions)
        out.reward_breakdowns = {
            a: Score(r or 0.0, "round", children=[Score(r or 0.0, "win")]) for a, r in out.rewards.items()
        }
        out.infos = {a: {"threw": t} for a, t in actions.items()}
        return out


async def test_per_agent_breakdowns_metadata_and_world_truncation() -> None:
    async with openenv.testing.InProcessServer(ScoredRounds) as server:
        async with server.client(agent_ids=["player_0"]) as a, server.client(join_token=a.world.join_token) as b:
            await a.reset()
            await b.reset()
            ra, rb = await asyncio.wait_for(asyncio.gather(a.step(1), b.step(0)), WAIT)
            mine = ra.agents["player_0"]
            assert mine.reward_breakdown.score == 1.0 and mine.reward_breakdown.children[0].name == "win"
            assert mine.metadata == {"threw": 1} and rb.agents["player_1"].metadata == {"threw": 0}  # each its own
            assert not ra.done and ra.to_act == ["player_0", "player_1"]
            ra, rb = await asyncio.wait_for(asyncio.gather(a.step(0), b.step(0)), WAIT)
            assert ra.done and ra.truncated and not ra.terminated and ra.to_act == []  # the limit, not the game
            assert ra.agents["player_0"].truncated and rb.agents["player_1"].truncated
            st = await a.state()
            assert st.status == openenv.EpisodeStatus.TRUNCATED and st.step_count == 2


async def test_an_owner_reset_aborts_a_joint_step_still_gathering() -> None:
    from openenv.runtime.world import Worlds

    async with openenv.testing.InProcessServer(RockPaperScissors) as server:
        async with (
            server.client(agent_ids=["player_1"]) as owner,
            server.client(join_token=owner.world.join_token) as b,
        ):
            await owner.reset()
            await b.reset()
            waiting = asyncio.ensure_future(b.step(0))  # player_0's part: it waits for player_1's
            worlds = Worlds.of(server.manager)
            await wait_until(
                lambda: any(w.gathered for w in worlds.by_token.values()), WAIT, "player_0's action gathered"
            )
            await owner.reset()
            with pytest.raises(openenv.Aborted, match="new episode"):
                await asyncio.wait_for(waiting, WAIT)


async def test_bad_multi_agent_requests_get_clear_errors_and_the_world_goes_on() -> None:
    from openenv.v1 import environment_pb2 as pb

    async with openenv.testing.InProcessServer(RockPaperScissors) as server, server.client() as env:
        await env.reset()

        async def step(**fields: Any) -> None:
            await env._request(pb.SessionRequest(step=pb.StepRequest(**fields)))

        three = pb.StepRequest()
        env.encode_action(0, three.action)
        with pytest.raises(openenv.InvalidArgument, match="not both"):
            await step(action=three.action, actions={"player_0": three.action, "player_1": three.action})
        with pytest.raises(openenv.InvalidArgument, match="unknown agent"):
            await step(actions={"nobody": three.action})
        bad = pb.StepRequest()
        env.encode_action(7, bad.action)  # off the declared type: refused before the world sees it
        with pytest.raises(openenv.InvalidArgument):
            await step(actions={"player_0": bad.action, "player_1": three.action})
        with pytest.raises(openenv.InvalidArgument, match="needs an action"):
            await step()
        r = await env.observe(wait=True, wait_timeout=-1.0)  # its agents are to act: answered at once
        assert r.to_act == ["player_0", "player_1"]
        r = await env.step_agents({"player_0": 2, "player_1": 2})  # the world is unharmed
        assert r.step_count == 1 and all(s.reward == 0.0 for s in r.agents.values())


class StuckTicTacToe(TicTacToe):
    """Tic-tac-toe whose moves wait for the test to release them (a step that outlives its timeout)."""

    run_in_thread = True
    inline_threshold_s = 0
    release = threading.Event()

    def step(self, actions: Any) -> Any:
        assert self.release.wait(WAIT)
        return super().step(actions)


async def test_a_world_step_that_outlives_its_timeout_aborts_the_episode() -> None:
    async with openenv.testing.InProcessServer(StuckTicTacToe) as server, server.client() as env:
        await env.reset()
        try:
            with pytest.raises(openenv.DeadlineExceeded):
                await env.step(4, step_timeout=0.05)
        finally:
            StuckTicTacToe.release.set()
        st = await env.state()
        assert st.status == openenv.EpisodeStatus.ABORTED and st.step_count == 0
        with pytest.raises(openenv.FailedPrecondition, match="aborted"):
            await env.step(0)
        r = await env.reset()
        assert r.to_act == ["x"]
