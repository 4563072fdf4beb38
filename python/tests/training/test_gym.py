"""Gymnasium adapters over real gRPC servers: spaces derived from the advertised TypeSpecs,
Gymnasium's own ``check_env`` on gridworld (typed messages) and a tensor environment, and
the vector adapter stepping 16 instances in ONE session, equal to Gymnasium's own
``SyncVectorEnv`` over single-instance adapters, in each autoreset mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from gymnasium.vector import AutoresetMode
from openenv_testenvs import Counter, TensorEnv
from openenv_testkit import server_thread

import openenv
import openenv.gym
from gridworld import GridWorldEnvironment


class Walk(openenv.Environment):
    """JSON-typed: step -1/0/+1 on a line; truncated after 3 steps; reset(seed) starts at seed % 10."""

    action_type: ClassVar[Any] = {"type": "integer", "minimum": -1, "maximum": 1}
    observation_type: ClassVar[Any] = {
        "type": "object",
        "properties": {"pos": {"type": "integer", "minimum": -100, "maximum": 100}, "note": {"enum": ["a", "b"]}},
        "required": ["pos", "note"],
    }
    max_episode_steps = 3
    deterministic = True

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.pos = 0 if seed is None else seed % 10
        return {"pos": self.pos, "note": "a"}

    def step(self, action: int) -> openenv.StepResult:
        self.pos += action
        return openenv.StepResult({"pos": self.pos, "note": "b"}, reward=float(action))


def test_gridworld_passes_check_env_and_renders_its_maze() -> None:
    with server_thread(GridWorldEnvironment) as srv:
        env = openenv.gym.make(srv.address, render_mode="ansi")
        try:
            assert env.action_space == gym.spaces.Discrete(4)  # Move without MOVE_UNSPECIFIED
            assert isinstance(env.observation_space, gym.spaces.Dict)
            assert set(env.observation_space.spaces) == {"agent", "goal", "grid", "bumped"}
            check_env(env, skip_close_check=True)
            _, info = env.reset(seed=5)
            assert "A" in env.render() and info["distance_to_goal"] > 0
            obs2, reward, _, _, info = env.step(env.action_space.sample())
            assert obs2 in env.observation_space and isinstance(reward, float) and info["step_count"] == 1
        finally:
            env.close()


def test_a_tensor_environment_passes_check_env() -> None:
    with server_thread(TensorEnv) as srv:
        env = openenv.gym.make(srv.address)
        try:
            assert env.action_space == gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
            check_env(env, skip_close_check=True)
            env.reset(seed=1)
            obs, *_ = env.step(np.array([1, 2, 3], dtype=np.float32))
            assert obs.tolist() == [2.0, 4.0, 6.0]
        finally:
            env.close()


def test_json_schema_types_map_to_spaces_and_untyped_ones_are_refused() -> None:
    with server_thread(Walk) as srv:
        env = openenv.gym.make(srv.address)
        try:
            assert env.action_space == gym.spaces.Discrete(3, start=-1)
            assert env.observation_space["note"] == gym.spaces.Discrete(2)
            check_env(env, skip_close_check=True)
        finally:
            env.close()
    with server_thread(Counter) as srv:  # no observation type: nothing to derive a space from
        with pytest.raises(openenv.gym.SpaceError, match="observation"):
            openenv.gym.make(srv.address)
        assert srv.manager.active == 0  # make() closed the session it opened


class Board(openenv.Environment):
    """A 2x3 board of cells -1..1 (nested fixed-length arrays, as a board game's view)."""

    action_type: ClassVar[Any] = {"type": "integer", "minimum": 0, "maximum": 2}
    row: ClassVar[Any] = {
        "type": "array",
        "items": {"type": "integer", "minimum": -1, "maximum": 1},
        "minItems": 3,
        "maxItems": 3,
    }
    observation_type: ClassVar[Any] = {
        "type": "object",
        "properties": {"board": {"type": "array", "items": row, "minItems": 2, "maxItems": 2}},
        "required": ["board"],
    }
    deterministic = True

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.board = [[0, 0, 0], [0, 0, 0]]
        return {"board": self.board}

    def step(self, action: int) -> openenv.StepResult:
        self.board[1][action] = 1
        return openenv.StepResult({"board": self.board}, terminated=all(self.board[1]))


def test_nested_fixed_length_arrays_are_one_box_of_their_shape() -> None:
    """A board (rows of cells) is a Box of shape (rows, columns), not a sequence of rows."""
    with server_thread(Board) as srv:
        env = openenv.gym.make(srv.address)
        try:
            assert env.observation_space["board"] == gym.spaces.Box(-1, 1, (2, 3), np.int64)
            obs, _ = env.reset(seed=0)
            obs, *_ = env.step(1)
            assert obs["board"].shape == (2, 3) and obs["board"][1].tolist() == [0, 1, 0]
            check_env(env, skip_close_check=True)
        finally:
            env.close()


def test_a_render_mode_the_observations_cannot_serve_is_refused() -> None:
    with server_thread(TensorEnv) as srv:
        with pytest.raises(ValueError, match="render_mode 'rgb_array' is not offered"):
            openenv.gym.make(srv.address, render_mode="rgb_array")


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_matches_gymnasiums_sync_vector_env(mode: AutoresetMode) -> None:
    n = 16
    with server_thread(Walk) as srv:
        ours = openenv.gym.make_vec(srv.address, num_envs=n, autoreset_mode=mode)
        ref = gym.vector.SyncVectorEnv([lambda: openenv.gym.make(srv.address)] * n, autoreset_mode=mode)
        try:
            assert ours.client.client.num_envs == n and srv.manager.active == 2 * n  # one session holds 16
            assert ours.metadata["autoreset_mode"] == mode
            assert ours.single_observation_space == ref.single_observation_space
            assert ours.action_space == ref.action_space
            o1, _ = ours.reset(seed=list(range(n)))
            o2, _ = ref.reset(seed=list(range(n)))
            assert data_equivalence(o1, o2)
            ours.action_space.seed(0)
            for _ in range(7):  # two episode ends (3-step episodes) and their autoresets
                a = ours.action_space.sample()
                s1, s2 = ours.step(a), ref.step(a)
                for x, y in zip(s1[:4], s2[:4], strict=True):
                    assert data_equivalence(x, y)
                if mode is AutoresetMode.SAME_STEP and s2[3].any():
                    assert data_equivalence(s1[4]["final_obs"], s2[4]["final_obs"])
        finally:
            ours.close()
            ref.close()


def test_gymnasium_make_opens_a_remote_session_with_a_spec_and_check_env_has_nothing_to_warn() -> None:
    import warnings

    with server_thread(GridWorldEnvironment) as srv:
        env = gym.make("openenv/remote", url=srv.address, render_mode="ansi", options={"size": 5})
        try:
            assert env.spec is not None and env.spec.id == "openenv/remote"
            assert env.spec.kwargs["url"] == srv.address
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                check_env(env.unwrapped)  # the close check and the render-mode check need the spec
            assert [str(w.message) for w in caught] == []
            _, info = env.reset(seed=2)
            assert "A" in env.render() and "distance_to_goal" in info
        finally:
            env.close()
        direct = openenv.gym.make(srv.address)  # made without gymnasium.make: the same spec
        assert direct.spec is not None and direct.spec.id == "openenv/remote"
        again = direct.spec.make()  # another session of the same server
        try:
            assert again.unwrapped.episode_id == "" and again.action_space == direct.action_space
        finally:
            again.close()
            direct.close()
            direct.close()  # closing twice is allowed
        envs = gym.make_vec("openenv/remote", num_envs=3, vectorization_mode="vector_entry_point", url=srv.address)
        try:
            obs, _ = envs.reset(seed=0)
            assert len(obs["grid"]) == 3 and isinstance(envs, openenv.gym.GymVectorEnv)
        finally:
            envs.close()
        with pytest.raises(ValueError, match="needs the server's URL"):
            gym.make("openenv/remote")
