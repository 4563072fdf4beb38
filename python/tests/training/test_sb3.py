"""Classic RL learns through the wire: examples/sb3_gridworld.py trains Stable-Baselines3 PPO on
gridworld served over gRPC, 16 mazes in one vectorised session, and the trained policy beats a
random one on the same fixed seeds by a stated margin; the run writes its PNG and JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from openenv_testkit import REPO_ROOT, server_thread

from gridworld import GridWorldEnvironment

MARGIN = 0.3
"""Mean return over the 40 evaluation mazes: trained > random + MARGIN (random ~0.68, optimal ~1.34)."""


@pytest.mark.slow
def test_ppo_through_grpc_beats_a_random_policy(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("sb3_gridworld", REPO_ROOT / "examples" / "sb3_gridworld.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with server_thread(GridWorldEnvironment) as srv:
        result = example.train(srv.address, timesteps=20_000, out=tmp_path, seed=0)
    assert result["trained_mean"] > result["random_mean"] + MARGIN, result
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "returns.json").read_text())
    assert len(saved["trained_returns"]) == len(saved["random_returns"]) == 40
    assert len(saved["train_episode_returns"]) > 100  # episodes finished across the 16 instances


def test_sb3_ppo_runs_on_the_vector_adapter_and_sb3s_checks_pass() -> None:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecCheckNan

    import openenv.gym
    from openenv.gym import SB3VecEnv

    size = 5
    space = gym.spaces.Box(0.0, 1.0, (3 * size * size,), np.float32)

    def planes(obs: dict) -> np.ndarray:  # type: ignore[type-arg]
        """The maze as one-hot planes (walls, agent, goal)."""
        return np.array([[c == ch for row in obs["grid"] for c in row] for ch in "#AG"], dtype=np.float32).ravel()

    with server_thread(GridWorldEnvironment) as srv:
        # SB3's own checker on one session, through the transform SB3 users write.
        single = gym.wrappers.TransformObservation(openenv.gym.make(srv.address, options={"size": size}), planes, space)
        check_env(single, warn=True)
        single.close()

        opts = {"size": size}
        venv = SB3VecEnv.make(srv.address, num_envs=4, options=opts, transform=planes, observation_space=space)
        try:
            assert venv.get_attr("render_mode") == [None] * 4 and venv.env_is_wrapped(gym.Wrapper) == [False] * 4
            model = PPO("MlpPolicy", VecCheckNan(venv, raise_exception=True), n_steps=32, batch_size=64, n_epochs=1,
                        seed=0, device="cpu")  # fmt: skip
            model.set_logger(Logger(None, []))
            model.learn(total_timesteps=128)  # VecCheckNan raises on any NaN/inf crossing the adapter
            assert model.num_timesteps == 128
            # SB3's step contract: reset obs after a done, the last one in the info, a Monitor-like episode.
            venv.seed(3)
            obs = venv.reset()
            assert obs.shape == (4, space.shape[0]) and obs.dtype == np.float32
            ended: list[dict] = []  # type: ignore[type-arg]
            for _ in range(150):
                venv.step_async(np.array([venv.action_space.sample() for _ in range(4)]))
                obs, rewards, dones, infos = venv.step_wait()
                assert rewards.dtype == np.float32 and dones.dtype == bool and len(infos) == 4
                ended += [info for info, done in zip(infos, dones, strict=True) if done]
                if ended:
                    break
            assert ended, "no episode ended in 150 random steps of 4 mazes"
            last = ended[0]
            assert last["terminal_observation"].shape == space.shape and last["episode"]["l"] >= 1
            assert "TimeLimit.truncated" in last
        finally:
            venv.close()
