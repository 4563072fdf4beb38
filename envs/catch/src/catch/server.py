"""Catch: a small arcade game whose observation is an RGB frame.

A ball falls from the top of a 16x16 board, one row per step, drifting left or right; the
agent moves a 3-cell paddle on the bottom row (action 0 left, 1 stay, 2 right). Catching a
ball scores +1, missing it -1; a new ball starts at once; the episode ends after 10 balls.
The observation is the frame, a ``uint8`` tensor of shape (64, 64, 3) (each cell 4x4 pixels:
black background, white ball, green paddle), for classic-RL trainers and web viewers alike.
``reset(seed=s)`` fixes every ball's start and drift.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

import openenv

SIZE = 16
SCALE = 4
BALLS = 10
PADDLE = 3


class CatchEnvironment(openenv.Environment):
    """Move the paddle to catch falling balls; observations are RGB frames."""

    name = "catch"
    version = "0.1.0"
    description = "A small arcade game: catch falling balls with a paddle; observations are 64x64 RGB frames."
    deterministic = True
    run_in_thread = False
    max_sessions = 256
    action_type: ClassVar[Any] = {"type": "integer", "minimum": 0, "maximum": 2}
    observation_type: ClassVar[Any] = openenv.TensorSpec(np.uint8, (SIZE * SCALE, SIZE * SCALE, 3), 0, 255)
    reward_range = (-1.0, 1.0)
    example_actions = (0, 1, 2)
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "kind": "arcade", "render": "rgb_array"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._start(options.get("seed"))

    def _start(self, seed: Any) -> None:
        self.rng = random.Random(None if seed is None else int(seed))
        self.paddle = SIZE // 2
        self.balls_left = BALLS
        self.caught = 0
        self._new_ball()

    def _new_ball(self) -> None:
        self.ball = [0, self.rng.randrange(SIZE)]
        self.drift = self.rng.choice((-1, 0, 1))

    def frame(self) -> np.ndarray:
        """The board as an RGB image (the observation)."""
        img = np.zeros((SIZE, SIZE, 3), np.uint8)
        img[self.ball[0], self.ball[1]] = (255, 255, 255)
        lo = self.paddle - PADDLE // 2
        img[SIZE - 1, max(0, lo) : lo + PADDLE] = (0, 200, 0)
        return np.kron(img, np.ones((SCALE, SCALE, 1), np.uint8))

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(seed)
        return openenv.StepResult(self.frame(), metadata={"balls_left": self.balls_left})

    def step(self, action: Any) -> openenv.StepResult:
        self.paddle = min(SIZE - 1 - PADDLE // 2, max(PADDLE // 2, self.paddle + int(action) - 1))
        row, col = self.ball
        col += self.drift
        if col < 0 or col >= SIZE:  # bounce off the walls
            self.drift = -self.drift
            col = min(SIZE - 1, max(0, col))
        self.ball = [row + 1, col]
        reward = 0.0
        if self.ball[0] == SIZE - 1:
            hit = abs(self.ball[1] - self.paddle) <= PADDLE // 2
            reward = 1.0 if hit else -1.0
            self.caught += int(hit)
            self.balls_left -= 1
            if self.balls_left > 0:
                self._new_ball()
        return openenv.StepResult(
            self.frame(), reward=reward, terminated=self.balls_left == 0, metadata={"caught": self.caught}
        )

    def state(self) -> dict[str, Any]:
        return {"ball": list(self.ball), "paddle": self.paddle, "balls_left": self.balls_left, "caught": self.caught}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the catch environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(CatchEnvironment, ns.host, ns.port, ready=lambda s: print(f"catch serving on {s.address}"))


if __name__ == "__main__":
    main()
