"""Environments that show pictures, for the playground's browser tests (served by
``openenv serve render_envs:Frames`` from this directory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import openenv


class Frames(openenv.Environment):
    """Observations are RGB frames (8x8x3 uint8 tensors, JSON nested lists on /ws); the
    render hook returns an RGBA array. Step ``{"color": [r, g, b]}`` paints the frame."""

    action_type = dict
    observation_type = dict
    run_in_thread = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.color = [0, 0, 0]

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.color = [255, 0, 0]
        return self._obs()

    def step(self, action: dict[str, Any]) -> openenv.StepResult:
        self.color = [int(c) for c in action["color"]]
        return openenv.StepResult(self._obs(), reward=1.0)

    def _obs(self) -> dict[str, Any]:
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[:, :] = self.color
        return {"frame": frame.tolist()}

    def render(self) -> np.ndarray:
        img = np.zeros((16, 24, 4), dtype=np.uint8)
        img[..., 1] = 200  # green
        img[..., 3] = 255
        return img


class GreyFrames(openenv.Environment):
    """Observations are grey frames (6x10 uint8 tensors, an Atari screen's shape in small):
    reset gives a frame of 40s, step ``v`` one of ``v``s."""

    action_type = openenv.TensorSpec(np.uint8, ())
    observation_type = openenv.TensorSpec(np.uint8, (6, 10), 0, 255)
    run_in_thread = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        return np.full((6, 10), 40, dtype=np.uint8)

    def step(self, action: np.ndarray) -> openenv.StepResult:
        return openenv.StepResult(np.full((6, 10), int(action), dtype=np.uint8), reward=0.0)
