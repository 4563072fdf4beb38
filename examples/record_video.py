#!/usr/bin/env python3
"""Record a video of a trained MuJoCo policy through the Gymnasium adapter.

``gymnasium.make("openenv/mujoco-invertedpendulum-v5", render_mode="rgb_array")`` serves the
catalog entry in this process; its frames come from the environment's render hook (the same
picture ``/web`` shows), so Gymnasium's ``RecordVideo`` writes them to an MP4. The policy is
Stable-Baselines3's PPO, trained here for ``--timesteps`` steps (0: a random policy), or loaded
from ``--model`` (a ``PPO.save`` zip). Any ``openenv/<name>`` id that renders works with
``--id`` (``openenv/ale-pong``, ``openenv/mujoco-hopper-v5``, ...).

    pip install torch==2.13.0 './python[rl,video]' './catalog[mujoco,atari]'   # from a clone's root
    python examples/record_video.py --out build/video                     # ~1 minute: train, then record
    python examples/record_video.py --id openenv/ale-pong --timesteps 0   # a random Pong player
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import RecordVideo

import openenv.gym  # noqa: F401 - registers the openenv/<name> ids


def train(env_id: str, timesteps: int, seed: int) -> Any:
    """PPO on ``env_id`` for ``timesteps`` steps (an MLP: vector observations)."""
    from stable_baselines3 import PPO

    env = gym.make(env_id)
    try:
        model = PPO("MlpPolicy", env, n_steps=512, batch_size=64, seed=seed, verbose=0, device="cpu")
        model.learn(total_timesteps=timesteps)
    finally:
        env.close()
    return model


def record(env_id: str, out: Path, policy: Any = None, *, seed: int = 0, max_frames: int = 500) -> dict[str, Any]:
    """One episode (at most ``max_frames`` steps) of ``policy`` (``None``: random actions) on
    ``env_id``, recorded to ``out``; returns the MP4's path, the steps and the return."""
    env = RecordVideo(
        gym.make(env_id, render_mode="rgb_array"),
        video_folder=str(out),
        name_prefix=env_id.replace("/", "-"),
        episode_trigger=lambda episode: episode == 0,
        video_length=max_frames,
        disable_logger=True,
    )
    steps, total = 0, 0.0
    try:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done and steps < max_frames:
            action = env.action_space.sample() if policy is None else policy.predict(obs, deterministic=True)[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            steps, total, done = steps + 1, total + float(reward), terminated or truncated
    finally:
        env.close()  # writes the video
    (video,) = sorted(out.glob(f"{env_id.replace('/', '-')}-episode-0.mp4"))
    return {"video": str(video), "steps": steps, "return": total}


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--id", default="openenv/mujoco-invertedpendulum-v5", help="a registered openenv/<name> id")
    p.add_argument("--timesteps", type=int, default=10_000, help="PPO training steps (0: a random policy)")
    p.add_argument("--model", type=Path, help="a saved PPO policy to record instead of training one")
    p.add_argument("--out", type=Path, default=Path("build/video"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-frames", type=int, default=500)
    args = p.parse_args(argv)
    policy: Any = None
    if args.model:
        from stable_baselines3 import PPO

        policy = PPO.load(args.model, device="cpu")
    elif args.timesteps > 0:
        print(f"training PPO on {args.id} for {args.timesteps} steps ...", flush=True)
        policy = train(args.id, args.timesteps, args.seed)
        args.out.mkdir(parents=True, exist_ok=True)
        policy.save(args.out / "policy.zip")
    result = record(args.id, args.out, policy, seed=args.seed, max_frames=args.max_frames)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
