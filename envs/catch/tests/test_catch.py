"""Catch over a real gRPC server on loopback: RGB frames as tensors, seeded balls, a
tracking policy that catches every ball, a still one that misses."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import openenv
from catch import CatchEnvironment
from catch.server import SCALE, SIZE


def play(seed: int, policy: str) -> tuple[list[float], np.ndarray, Any]:
    async def main() -> Any:
        async with openenv.Server(CatchEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.EnvClient(srv.address) as env:
                r = await env.reset(seed=seed)
                first = r.observation
                rewards = []
                while not r.terminated:
                    st = (await env.state()).state
                    ball, paddle = st["ball"][1], st["paddle"]
                    a = 1 if policy == "still" else (2 if ball > paddle else 0 if ball < paddle else 1)
                    r = await env.step(a)
                    rewards.append(r.reward)
                return rewards, first, r

    return asyncio.run(asyncio.wait_for(main(), 60))


def test_observations_are_rgb_frames_with_the_ball_and_paddle() -> None:
    _, frame, _ = play(3, "still")
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8
    assert frame.shape == (SIZE * SCALE, SIZE * SCALE, 3)
    assert (frame == 255).all(axis=2).sum() == SCALE * SCALE  # one white ball cell
    assert (frame[:, :, 1] == 200).sum() == 3 * SCALE * SCALE  # a 3-cell green paddle


def test_a_tracking_policy_beats_standing_still_and_seeds_repeat_episodes() -> None:
    track, _, last = play(5, "track")
    still, _, _ = play(5, "still")
    again, _, _ = play(5, "still")
    assert sum(r for r in track if r) > sum(r for r in still if r)
    assert still == again
    assert last.terminated and last.metadata["caught"] >= 8
