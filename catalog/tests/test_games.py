"""The catalog's multi-agent games (RFC 0012) played over real gRPC on loopback, with the real
OpenSpiel, PettingZoo and TextArena packages: who acts, what each agent sees (never the other's
card), joint actions, illegal moves refused, agent vs agent across two clients, and each game
scored as the package itself scores it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import openenv
from openenv_catalog.games.connect_four import ConnectFourEnvironment
from openenv_catalog.games.openspiel import OpenSpielGame
from openenv_catalog.importers import openspiel, pettingzoo, textarena

WAIT = 120.0  # a hang guard, never a speed check


@contextlib.asynccontextmanager
async def served(cls: type[openenv.Environment]) -> AsyncIterator[str]:
    async with openenv.Server(cls, "127.0.0.1", 0) as srv:
        yield srv.address


@contextlib.contextmanager
def server_thread(cls: type[openenv.Environment]) -> Iterator[str]:
    """A server on its own event loop in a thread, for blocking clients (PettingZoo's API)."""
    loop = asyncio.new_event_loop()
    srv = openenv.Server(cls, "127.0.0.1", 0)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(WAIT)
    try:
        yield srv.address
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


@contextlib.contextmanager
def serve_process(target: str) -> Iterator[str]:
    """``openenv serve TARGET`` in its own process on port 0; yields its address."""
    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        argv = [sys.executable, "-m", "openenv.cli", "serve", target, "--port", "0", "--no-http", "--ready-file", ready]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + WAIT
            while not os.path.exists(ready):
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the server did not become ready"
                time.sleep(0.05)
            yield Path(ready).read_text().strip()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=WAIT)


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    with warnings.catch_warnings():  # PettingZoo's style hints (agent names, dict observations)
        warnings.simplefilter("ignore", UserWarning)
        fn(*args, **kwargs)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(fn(), WAIT))


def returns(r: openenv.StepResult[Any]) -> dict[str, float | None]:
    return {a: s.reward for a, s in r.agents.items()}


def test_kuhn_poker_shows_each_agent_its_own_card_and_never_the_others() -> None:
    """OpenSpiel's kuhn poker, imperfect information: two deals that give player_1 the same card
    and player_0 different ones look the same to player_1 and different to player_0."""
    cls = openspiel.load("kuhn_poker")
    assert cls.hidden_information and cls.reward_sum == 0.0 and cls.seeded

    def deal(seed: int) -> tuple[int, int]:
        game = type("Kuhn", (OpenSpielGame,), {"game_string": "kuhn_poker"})()
        game.reset(seed)
        c0, c1 = game.state.history()[:2]
        return c0, c1

    deals = {seed: deal(seed) for seed in range(40)}
    pairs = [
        (a, b) for a in deals for b in deals if a < b and deals[a][1] == deals[b][1] and deals[a][0] != deals[b][0]
    ]
    assert pairs, deals
    a, b = pairs[0]

    async def go() -> dict[int, dict[str, Any]]:
        views = {}
        async with served(cls) as url, openenv.EnvClient(url) as env:
            for seed in (a, b):
                r = await env.reset(seed=seed)
                assert r.to_act == ["player_0"] and set(r.agents) == {"player_0", "player_1"}
                views[seed] = {agent: step.observation for agent, step in r.agents.items()}
        return views

    views = run(go)
    assert views[a]["player_1"]["text"] == views[b]["player_1"]["text"]
    assert views[a]["player_1"]["tensor"] == views[b]["player_1"]["tensor"]
    assert views[a]["player_0"]["text"] != views[b]["player_0"]["text"]
    assert views[a]["player_0"]["legal_action_names"] == ["Pass", "Bet"]
    assert views[a]["player_1"]["legal_actions"] == []  # not its turn


def test_openspiel_games_play_to_the_end_with_openspiels_returns() -> None:
    """Tic-tac-toe, connect four and leduc poker, random legal moves from one self-play session:
    each agent's rewards sum to OpenSpiel's return, and the returns to the declared sum."""

    async def go(game: str, seed: int) -> tuple[dict[str, float], dict[str, Any]]:
        rng = random.Random(seed)
        totals: dict[str, float] = {}
        async with served(openspiel.load(game)) as url, openenv.EnvClient(url) as env:
            r = await env.reset(seed=seed)
            while not r.done:
                (agent,) = r.to_act
                r = await env.step(rng.choice(r.agents[agent].observation["legal_actions"]))
                for a, s in r.agents.items():
                    totals[a] = totals.get(a, 0.0) + (s.reward or 0.0)
            return totals, (await env.state()).state

    for game in ("tic_tac_toe", "connect_four", "leduc_poker"):
        totals, state = run(lambda game=game: go(game, 7))
        assert state["terminal"] and state["returns"] == totals, (game, state, totals)
        assert (sum(totals.values()) == 0.0 and any(totals.values())) or game == "tic_tac_toe"


def test_a_simultaneous_openspiel_game_takes_a_joint_action() -> None:
    cls = openspiel.load("matrix_rps")
    assert cls.simultaneous

    async def go() -> openenv.StepResult[Any]:
        async with served(cls) as url, openenv.EnvClient(url) as env:
            r = await env.reset(seed=0)
            assert r.to_act == ["player_0", "player_1"]
            assert r.agents["player_0"].observation["legal_action_names"] == ["Rock", "Paper", "Scissors"]
            with pytest.raises(openenv.InvalidArgument, match="maximum"):  # the declared type refuses it
                await env.step_agents({"player_0": 0, "player_1": 7})
            return await env.step_agents({"player_0": 1, "player_1": 0})  # paper beats rock

    r = run(go)
    assert r.done and returns(r) == {"player_0": 1.0, "player_1": -1.0}


def test_connect_four_refuses_a_full_column_and_the_same_agent_moves_again() -> None:
    async def go() -> openenv.StepResult[Any]:
        async with served(ConnectFourEnvironment) as url, openenv.EnvClient(url) as env:
            r = await env.reset()
            for _ in range(6):  # red and yellow fill column 0
                r = await env.step(0)
            assert r.to_act == ["red"] and 0 not in r.agents["red"].observation["legal_actions"]
            with pytest.raises(openenv.InvalidArgument, match="column 0 is full"):
                await env.step(0)
            with pytest.raises(openenv.InvalidArgument):
                await env.step(7)
            r = await env.step(1)
            assert r.to_act == ["yellow"] and r.step_count == 7
            return r

    r = run(go)
    board = r.agents["red"].observation["board"]
    assert [row[0] for row in board] == [-1, 1, -1, 1, -1, 1] and board[5][1] == 1  # red's own side: 1


def test_connect_four_agent_vs_agent_across_two_clients() -> None:
    """red plays from one client, yellow from another that joined with the world's token."""

    async def side(env: openenv.EnvClient, moves: list[int]) -> openenv.StepResult[Any]:
        (me,) = env.world.agent_ids
        r = await env.reset()
        while True:
            if not r.done and me not in r.to_act:
                r = await env.observe(wait=True)
            if r.done:
                return r
            assert set(r.agents) == {me}  # a client sees only its own agent
            r = await env.step(moves.pop(0))

    async def go() -> tuple[openenv.StepResult[Any], openenv.StepResult[Any]]:
        async with served(ConnectFourEnvironment) as url, openenv.EnvClient(url, agent_ids=["red"]) as red:
            async with openenv.EnvClient(url, join_token=red.world.join_token) as yellow:
                assert list(yellow.world.agent_ids) == ["yellow"]
                return await asyncio.gather(side(red, [3, 3, 3, 3]), side(yellow, [4, 4, 4]))

    r_red, r_yellow = run(go)
    assert returns(r_red) == {"red": 1.0} and returns(r_yellow) == {"yellow": -1.0}
    assert r_red.terminated and r_yellow.terminated


def test_a_pettingzoo_aec_game_served_scores_as_pettingzoo_itself() -> None:
    """classic/tictactoe-v3 through the importer, and the same moves on PettingZoo directly."""
    import pettingzoo as pz

    moves = [0, 3, 1, 4, 2]  # player_1 fills cells 0, 1 and 2 (a line) before player_2 fills 3, 4, 5

    async def go() -> openenv.StepResult[Any]:
        async with served(pettingzoo.load("classic/tictactoe-v3")) as url, openenv.EnvClient(url) as env:
            r = await env.reset(seed=0)
            for m in moves:
                assert not r.done
                r = await env.step(m)
            return r

    r = run(go)
    ref = pz.make("aec", "classic/tictactoe-v3")
    ref.reset(seed=0)
    totals = {a: 0.0 for a in ref.possible_agents}
    for m in moves:
        ref.step(m)
        for a, v in ref.rewards.items():
            totals[a] += v
    assert r.done and returns(r) == totals and set(totals.values()) == {1.0, -1.0}


def test_a_pettingzoo_parallel_game_is_simultaneous() -> None:
    cls = pettingzoo.load("classic/rps-v2:parallel")
    assert cls.simultaneous and list(cls.agent_ids()) == ["player_0", "player_1"]

    async def go() -> tuple[openenv.StepResult[Any], int]:
        async with served(cls) as url, openenv.EnvClient(url) as env:
            r = await env.reset(seed=0)
            with pytest.raises(openenv.InvalidArgument, match="maximum"):
                await env.step_agents({"player_0": 9, "player_1": 0})
            steps = 0
            while not r.done:
                r = await env.step_agents({"player_0": 1, "player_1": 0})  # paper beats rock, every round
                steps += 1
            return r, steps

    r, steps = run(go)
    assert steps > 1 and r.truncated and r.agents["player_0"].reward == 1.0 and r.agents["player_1"].reward == -1.0


def test_pettingzoo_served_and_adapted_back_passes_pettingzoos_api_tests() -> None:
    """The round trip: PettingZoo's tic-tac-toe served by ``openenv serve import:pettingzoo:...``
    (its own process), driven through openenv.pettingzoo's AECEnv by PettingZoo's ``api_test``;
    rock-paper-scissors' ParallelEnv likewise through ``parallel_api_test``."""
    from pettingzoo.test import api_test, parallel_api_test

    from openenv.pettingzoo import RemoteAECEnv, RemoteParallelEnv

    with serve_process("import:pettingzoo:classic/tictactoe-v3") as url:
        env = RemoteAECEnv(url)
        try:
            _quietly(api_test, env, num_cycles=20)
            assert env.possible_agents == ["player_1", "player_2"]
        finally:
            env.close()
    with server_thread(pettingzoo.load("classic/rps-v2:parallel")) as url:
        par = RemoteParallelEnv(url)
        try:
            _quietly(parallel_api_test, par, num_cycles=20)
        finally:
            par.close()


def test_textarena_tic_tac_toe_is_two_agents_in_their_roles() -> None:
    """It imported as a single-player game and failed at reset; now two agents play it."""
    cls = textarena.load("TicTacToe-v0")
    assert list(cls.agent_ids()) == ["player_0", "player_1"]

    async def go() -> tuple[openenv.StepResult[Any], openenv.StepResult[Any]]:
        async with served(cls) as url, openenv.EnvClient(url) as env:
            first = await env.reset(seed=0)
            r = first
            for move in ("[0]", "[3]", "[1]", "[4]", "[2]"):
                r = await env.step(move)
            return first, r

    first, r = run(go)
    assert "You are Player 0" in first.agents["player_0"].observation
    assert "You are Player 1" in first.agents["player_1"].observation
    assert "You are Player 1" not in first.agents["player_0"].observation
    assert r.done and returns(r) == {"player_0": 1.0, "player_1": -1.0}


def test_textarena_kuhn_poker_keeps_each_card_private() -> None:
    async def go() -> dict[str, str]:
        async with served(textarena.load("KuhnPoker-v0")) as url, openenv.EnvClient(url) as env:
            r = await env.reset(seed=1)
            return {a: s.observation for a, s in r.agents.items()}

    views = run(go)
    cards = {a: v.split("Your card is: '")[1][0] for a, v in views.items()}
    assert cards["player_0"] != cards["player_1"]
    assert f"Your card is: '{cards['player_1']}'" not in views["player_0"]
    assert f"Your card is: '{cards['player_0']}'" not in views["player_1"]


def test_bad_game_names_are_clear_errors() -> None:
    with pytest.raises(LookupError, match="no_such_game"):
        openspiel.load("no_such_game")
    with pytest.raises(ValueError, match="ID:parallel"):
        pettingzoo.load("classic/tictactoe-v3:sideways")
    with pytest.raises(LookupError, match="registry has no 'classic/no-such-game-v0'"):
        pettingzoo.load("classic/no-such-game-v0")
    with pytest.raises(LookupError, match="neither a registered id nor a module"):
        pettingzoo.load("no_such_module_v0")
    with pytest.raises(LookupError, match="has no game"):
        textarena.load("NoSuchGame-v0")
    with pytest.raises(ValueError, match="number of players"):
        textarena.load("TicTacToe-v0:zero")


def test_openenv_import_names_the_agents_of_a_multi_agent_game() -> None:
    import json

    from click.testing import CliRunner

    from openenv_catalog.cli import import_command

    r = CliRunner().invoke(import_command, ["openspiel:matrix_rps"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["agents"] == {"player_0": "seat 0", "player_1": "seat 1"} and info["mode"] == "simultaneous"
    assert info["serve"] == "openenv serve import:openspiel:matrix_rps" and info["hidden_information"] is False
