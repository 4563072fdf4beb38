"""openenv.pettingzoo (RFC 0012): remote multi-agent worlds pass PettingZoo's own API tests.

Each game is served by a real ``openenv.Server`` on 127.0.0.1 (port 0) and reached over gRPC;
``pettingzoo.test.api_test`` (AECEnv) and ``parallel_api_test`` (ParallelEnv) play them with
random legal actions (the views' action masks), natively and through PettingZoo's conversions.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import pytest

pytest.importorskip("pettingzoo", reason="the pettingzoo extra")

import gymnasium
import numpy as np
from openenv_testkit import server_thread
from pettingzoo import AECEnv
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


# --------------------------------------------------------------------------- RFC 0016: parity


def _openspiel(game: str) -> type[openenv.MultiAgentEnvironment]:
    pytest.importorskip("pyspiel", reason="open-spiel (the catalog's openspiel extra)")
    from openenv_catalog.importers.openspiel import load

    cls: type[openenv.MultiAgentEnvironment] = load(game)
    return cls


@pytest.mark.parametrize("game", ["tic_tac_toe", "connect_four", "kuhn_poker"])
def test_openspiel_games_pass_the_aec_api_test_through_the_adapter(game: str) -> None:
    """OpenSpiel's views list ``legal_actions`` but carry no ``action_mask``: PettingZoo's
    ``api_test`` played illegal moves through the adapter (INVALID_ARGUMENT). The adapter now
    gives every view that lists its legal actions over a Discrete space the mask they make."""
    with server_thread(_openspiel(game)) as srv:
        env = RemoteAECEnv(srv.address)
        try:
            _quietly(api_test, env, num_cycles=CYCLES)
            env.reset(seed=3)
            agent = env.agent_selection
            mask = env.observe(agent)["action_mask"]
            assert [int(i) for i in np.flatnonzero(mask)] == [int(a) for a in env.observe(agent)["legal_actions"]]
            assert env.observation_space(agent).contains(env.observe(agent))
        finally:
            env.close()


def test_a_simultaneous_openspiel_game_passes_the_parallel_api_test() -> None:
    """matrix_rps through the Parallel adapter (its views' masks made from the legal actions)."""
    with server_thread(_openspiel("matrix_rps")) as srv:
        par = RemoteParallelEnv(srv.address)
        try:
            _quietly(parallel_api_test, par, num_cycles=CYCLES)
        finally:
            par.close()


class _Uneven(AECEnv):  # type: ignore[misc]
    """A PettingZoo AEC game whose agents differ: "a" picks 0-1, "b" picks 0-2; each agent's
    info says how many moves it made (PettingZoo's per-agent infos)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "uneven_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self._acts = {"a": gymnasium.spaces.Discrete(2), "b": gymnasium.spaces.Discrete(3)}
        self._obs = {a: gymnasium.spaces.Discrete(4) for a in self.possible_agents}

    def observation_space(self, agent: str) -> Any:
        return self._obs[agent]

    def action_space(self, agent: str) -> Any:
        return self._acts[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"moves": 0} for a in self.agents}
        self.turns = 0
        self.agent_selection = "a"

    def observe(self, agent: str) -> int:
        return self.turns

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self.infos[agent] = {"moves": self.infos[agent]["moves"] + 1, "last": int(action)}
        self.turns += 1
        if self.turns >= 3:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = "b" if agent == "a" else "a"


def test_agents_have_their_own_spaces_and_infos_end_to_end() -> None:
    """All agents shared one observation and action space, and the imported game's per-agent
    infos never reached the client. A PettingZoo game whose agents act differently, imported by
    the catalog and played back through the adapter, keeps both (RFC 0016: AgentSpec types)."""
    pytest.importorskip("openenv_catalog", reason="the catalog")
    from openenv_catalog.games.bind import environment
    from openenv_catalog.games.pettingzoo import AECGame

    game = type("UnevenGame", (AECGame,), {"factory": staticmethod(_Uneven)})
    cls = environment(game, name="uneven", version="0", description="uneven", source="test", kind="game")
    with server_thread(cls) as srv:
        env = RemoteAECEnv(srv.address)
        try:
            assert env.action_space("a") == gymnasium.spaces.Discrete(2)
            assert env.action_space("b") == gymnasium.spaces.Discrete(3)
            env.reset(seed=0)
            assert env.infos["a"] == {"moves": 0}
            with pytest.raises(openenv.InvalidArgument):  # b may play 2, a may not
                env.client.step(2, agent_id="a")
            env.step(1)  # a
            assert env.infos["a"] == {"moves": 1, "last": 1}
            env.step(2)  # b
            assert env.infos["b"] == {"moves": 1, "last": 2}
            _quietly(api_test, RemoteAECEnv(srv.address), num_cycles=CYCLES)
        finally:
            env.close()


def test_pettingzoo_imports_declare_what_the_certifier_checks() -> None:
    """PettingZoo's classic games never declared their reward sums (nor hidden information), so
    the certifier's checks of them never applied; the importer declares what it knows."""
    pytest.importorskip("openenv_catalog", reason="the catalog")
    from openenv_catalog.importers.pettingzoo import declared, load

    assert load("classic/tictactoe-v3").reward_sum == 0.0
    assert declared("classic/texas_holdem-v4") == {"reward_sum": 0.0, "hidden_information": True}
