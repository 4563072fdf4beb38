"""openenv.pettingzoo (RFC 0012): remote multi-agent worlds pass PettingZoo's own API tests.

Each game is served by a real ``openenv.Server`` on 127.0.0.1 (port 0) and reached over gRPC;
``pettingzoo.test.api_test`` (AECEnv) and ``parallel_api_test`` (ParallelEnv) play them with
random legal actions (the views' action masks), natively and through PettingZoo's conversions.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

pytest.importorskip("pettingzoo", reason="the pettingzoo extra")

from openenv_testkit import server_thread
from pettingzoo.test import api_test, parallel_api_test

import openenv
from openenv.games import HighCard, RockPaperScissors, TicTacToe
from openenv.pettingzoo import RemoteAECEnv, RemoteParallelEnv, aec_env, parallel_env

CYCLES = 50  # each game ends within 9 moves: every cycle count beyond that plays one episode


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    with warnings.catch_warnings():  # its style hints (agent names, dict observations) are warnings
        warnings.simplefilter("ignore", UserWarning)
        fn(*args, **kwargs)


@pytest.mark.parametrize("game", [TicTacToe, HighCard], ids=lambda c: c.__name__)
def test_turn_based_worlds_pass_the_aec_and_parallel_api_tests(game: type[openenv.MultiAgentEnvironment]) -> None:
    with server_thread(game) as srv:
        env = RemoteAECEnv(srv.address)
        try:
            _quietly(api_test, env, num_cycles=CYCLES)
            assert env.possible_agents == list(game.agent_ids())
        finally:
            env.close()
        par = parallel_env(srv.address)  # PettingZoo's turn_based_aec_to_parallel of the AEC adapter
        try:
            _quietly(parallel_api_test, par, num_cycles=CYCLES)
        finally:
            par.close()


def test_a_simultaneous_world_passes_the_parallel_and_aec_api_tests() -> None:
    with server_thread(RockPaperScissors) as srv:
        par = RemoteParallelEnv(srv.address)
        try:
            _quietly(parallel_api_test, par, num_cycles=CYCLES)
            obs, _ = par.reset(seed=1)
            _, rewards, terms, _, _ = par.step({"player_0": 1, "player_1": 0})  # paper covers rock
            assert rewards == {"player_0": 1.0, "player_1": -1.0} and not any(terms.values())
            assert set(obs) == {"player_0", "player_1"} and par.state() == {
                "round": 1,
                "last": {"player_0": 1, "player_1": 0},
            }
        finally:
            par.close()
        env = aec_env(srv.address)  # PettingZoo's parallel_to_aec of the parallel adapter
        try:
            _quietly(api_test, env, num_cycles=CYCLES)
        finally:
            env.close()


def test_aec_rewards_accumulate_as_last_reports_them() -> None:
    with server_thread(TicTacToe) as srv:
        env = RemoteAECEnv(srv.address)
        try:
            env.reset(seed=0)
            for cell in (0, 3, 1, 4, 2):  # x takes the top row
                assert env.observation_space(env.agent_selection).contains(env.observe(env.agent_selection))
                env.step(cell)
            seen = {}
            for agent in env.agent_iter():
                _, reward, terminated, _, _ = env.last()
                assert terminated
                seen[agent] = reward
                env.step(None)
            assert seen == {"x": 1.0, "o": -1.0} and env.agents == []
        finally:
            env.close()
        with pytest.raises(ValueError, match="simultaneous"):
            with server_thread(RockPaperScissors) as rps:
                RemoteAECEnv(rps.address)


def test_seeded_worlds_pass_pettingzoo_seed_tests() -> None:
    """The same seed gives the same episodes through the adapters (PettingZoo's seed tests)."""
    from pettingzoo.test import parallel_seed_test, seed_test

    for game in (TicTacToe, HighCard):
        with server_thread(game) as srv:
            _quietly(seed_test, lambda: RemoteAECEnv(srv.address), num_cycles=10)
    with server_thread(RockPaperScissors) as srv:
        _quietly(parallel_seed_test, lambda: RemoteParallelEnv(srv.address), num_cycles=10)
