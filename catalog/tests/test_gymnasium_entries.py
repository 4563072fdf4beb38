"""Every Gymnasium entry of the catalog through `openenv.gym.make`: the spaces of the original
exactly (Blackjack's Tuple, CartPole's per-dimension bounds, ...), Gymnasium's `check_env`
passing, and the same episode as the original for the same seed and actions."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from openenv.gym.registration import make_catalog
from openenv_catalog.importers.gymnasium import CURATED


def _available(env_id: str) -> bool:
    try:
        gym.make(env_id).close()
    except gym.error.DependencyNotInstalled:
        return False
    return True


def _same(space: gym.Space[object], got: object, want: object) -> bool:
    """Equal values of ``space`` (a Python int and a NumPy one alike)."""
    return bool(np.array_equal(gym.spaces.flatten(space, got), gym.spaces.flatten(space, want)))


@pytest.mark.parametrize("env_id", CURATED)
def test_openenv_gym_make_gives_the_original_spaces_and_passes_check_env(env_id: str) -> None:
    if not _available(env_id):
        pytest.skip(f"{env_id} needs a package that is not installed")
    name = "gymnasium-" + env_id.lower()
    original = gym.make(env_id)
    env = make_catalog(name=name, target=f"import:gymnasium:{env_id}")
    try:
        assert env.observation_space == original.observation_space
        assert env.action_space == original.action_space
        # The same episode as the original, step by step, for the same seed and actions (first:
        # Box2D's worlds outlive their episodes, so a world stepped before differs in the last bits).
        obs, _ = env.reset(seed=7)
        want, _ = original.reset(seed=7)
        assert _same(env.observation_space, obs, want)
        env.action_space.seed(7)
        for _ in range(5):
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            want, want_reward, want_term, _, _ = original.step(action)
            assert _same(env.observation_space, obs, want) and np.isclose(reward, want_reward)
            assert terminated == want_term
            if terminated or truncated:
                break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # check_env's advice (e.g. unbounded boxes) is not a failure
            check_env(env, skip_close_check=True)
    finally:
        env.close()
        original.close()


def test_an_entry_renders_frames_for_the_playground_and_plays_in_the_terminal() -> None:
    """render() is the /web picture: an RGB frame once an episode runs (classic_control's
    pygame drawing); `openenv play` plays Blackjack (a Tuple observation, a Discrete action)."""
    from openenv.json_protocol.render import render_to_json
    from openenv_catalog.importers.gymnasium import load

    env = load("CartPole-v1")()
    try:
        assert isinstance(env.render(), str)  # before the first reset: a note, not an error
        env.reset(seed=1)
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3 and frame.any()
        assert render_to_json(frame)["mime"] == "image/x-raw-rgb"
    finally:
        env.close()
    r = subprocess.run(
        [sys.executable, "-m", "openenv.cli", "play", "import:gymnasium:Blackjack-v1", "--seed", "3"],
        input="s\n0\nq\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "observation: [7, 10, 0]" in r.stdout and "terminated=True" in r.stdout, r.stdout
