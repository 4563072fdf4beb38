"""Frames from simulators through the Gymnasium adapter: ``render_mode="rgb_array"`` on catalog
entries whose observations are no picture (MuJoCo's vectors, Atari's grey screens) returns
the environment's own render, so Gymnasium's ``RecordVideo`` writes a real video of them
(examples/record_video.py). Before, the adapter refused the mode: only observations that are
RGB images could render.

Budget (not asserted): about 15 s of one core (MuJoCo's first offscreen render takes a few
seconds; the videos are 20-30 frames)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import imageio
import numpy as np
import pytest
from openenv_testkit import REPO_ROOT

import openenv.gym  # registers the ids


def _frames(path: Path) -> list[np.ndarray]:
    with imageio.get_reader(str(path)) as reader:  # imageio-ffmpeg: moviepy's own reader
        return [np.asarray(f) for f in reader]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_video", REPO_ROOT / "examples" / "record_video.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("env_id", "shape"), [("openenv/mujoco-hopper-v5", (256, 256, 3)), ("openenv/ale-pong", (210, 160, 3))]
)
def test_render_returns_the_simulators_frame(env_id: str, shape: tuple[int, ...]) -> None:
    """The observation is a vector (MuJoCo) or a grey screen (Atari), the render an RGB frame
    of the current state: it changes as the episode goes."""
    env = gym.make(env_id, render_mode="rgb_array")
    try:
        assert "rgb_array" in env.metadata["render_modes"]
        assert not (isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.shape[-1:] == (3,))
        env.reset(seed=0)
        first = env.render()
        assert first.shape == shape and first.dtype == np.uint8 and first.std() > 0
        frames = [first]
        for _ in range(30):
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            frames.append(env.render())
            if terminated or truncated:
                break
        assert any(not np.array_equal(first, f) for f in frames[1:])
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["openenv/mujoco-hopper-v5", "openenv/ale-pong"])
def test_record_video_writes_the_episode(env_id: str, tmp_path: Path) -> None:
    """examples/record_video.py with a random policy: an MP4 of one frame per step plus the
    reset's, frames of the simulator's size that are not blank."""
    result = _example().record(env_id, tmp_path, None, seed=0, max_frames=20)
    frames = _frames(Path(result["video"]))
    assert len(frames) == result["steps"] + 1 and result["steps"] >= 5
    assert all(f.ndim == 3 and f.shape[-1] == 3 for f in frames)
    assert max(float(f.std()) for f in frames) > 5.0  # a picture, not a blank


def test_a_text_render_is_ansi_and_not_a_frame() -> None:
    """gridworld renders text: 'ansi' returns it; 'rgb_array' says which mode to use."""
    env = gym.make("openenv/gridworld", render_mode="ansi")
    try:
        env.reset(seed=0)
        assert "A" in env.render()
    finally:
        env.close()
    env = gym.make("openenv/chess_env", render_mode="rgb_array")
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match="render_mode='ansi'"):
            env.render()
    finally:
        env.close()


def test_a_remote_session_without_frames_refuses_rgb_array(tmp_path: Any) -> None:
    """Over gRPC no render request exists: a vector-observation environment refuses the mode
    at construction, saying why."""
    from openenv_testkit import server_thread

    from openenv_catalog.importers.mujoco import load

    with server_thread(load("InvertedPendulum-v5")) as srv:
        with pytest.raises(ValueError, match="no render hook is reachable"):
            openenv.gym.make(srv.address, render_mode="rgb_array")
