#!/usr/bin/env python3
"""A benchmark, not a test: Stable-Baselines3 learns a MuJoCo task and an Atari game a little,
through the wire, and the trained policy's return is reported beside a random policy's.

Each task is served by ``openenv serve import:...`` in its own process; PPO trains on 8
instances in ONE vectorised session (``openenv.gym.SB3VecEnv``, RFC 0002), then the trained
and a uniformly random policy play the same fixed seeds (one session, seeded resets):

* ``mujoco``: ``import:mujoco:InvertedPendulum-v5`` (MlpPolicy; the return is the number of
  steps the pole stays up, at most 1,000);
* ``atari``: ``import:ale:Breakout`` (84x84 grey frames, 4 stacked by SB3's ``VecFrameStack``,
  CnnPolicy; sticky actions on, as the catalog serves it; an evaluation episode is capped at
  ``--eval-steps`` steps).

    python examples/sb3_simulators.py --only mujoco --timesteps 20000
    python examples/sb3_simulators.py --only atari --timesteps 100000 --out build/sb3-sim

Writes ``returns.json`` under ``--out``: per task, the timesteps, the wall time and both
policies' returns. docs/training.md quotes a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

TASKS: dict[str, dict[str, Any]] = {
    "mujoco": {"target": "import:mujoco:InvertedPendulum-v5", "policy": "MlpPolicy", "timesteps": 20_000},
    "atari": {"target": "import:ale:Breakout", "policy": "CnnPolicy", "timesteps": 100_000},
}
EVAL_SEEDS = list(range(1000, 1010))
STACK = 4


@contextlib.contextmanager
def serve(target: str, sessions: int = 32) -> Iterator[str]:
    """``openenv serve TARGET`` on loopback port 0; yields its URL (from --ready-file)."""
    with tempfile.TemporaryDirectory() as d:
        ready = Path(d) / "ready"
        cmd = [sys.executable, "-m", "openenv.cli", "serve", target, "--port", "0", "--ready-file", str(ready)]
        cmd += ["--max-sessions", str(sessions), "--idle-timeout", "0"]
        proc = subprocess.Popen(cmd, env={**os.environ, "GRPC_VERBOSITY": "ERROR"}, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{target} did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.05)
            yield ready.read_text().strip()
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def evaluate(url: str, act: Callable[[Any], Any], kind: str, max_steps: int) -> list[float]:
    """Returns of one episode per evaluation seed, each capped at ``max_steps`` steps."""
    import openenv.gym

    env = openenv.gym.make(url)
    returns = []
    try:
        for seed in EVAL_SEEDS:
            obs, _ = env.reset(seed=seed)
            frames = [obs] * STACK
            total, steps, done = 0.0, 0, False
            while not done and steps < max_steps:
                seen = np.concatenate(frames[-STACK:], axis=-1) if kind == "atari" else obs
                obs, reward, terminated, truncated, _ = env.step(act(seen))
                frames.append(obs)
                total += float(reward)
                steps += 1
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns


def run(kind: str, timesteps: int, eval_steps: int) -> dict[str, Any]:
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecFrameStack

    from openenv.gym import SB3VecEnv

    spec = TASKS[kind]
    with serve(spec["target"]) as url:
        venv: Any = SB3VecEnv.make(url, num_envs=8)
        if kind == "atari":
            venv = VecFrameStack(venv, STACK)
            kwargs: dict[str, Any] = {"n_steps": 128, "n_epochs": 4, "batch_size": 256, "learning_rate": 2.5e-4}
            kwargs |= {"clip_range": 0.1, "ent_coef": 0.01, "vf_coef": 0.5}
        else:
            kwargs = {"n_steps": 256, "batch_size": 64, "learning_rate": 1e-3}
        model = PPO(spec["policy"], venv, seed=0, device="cpu", verbose=0, **kwargs)
        start = time.monotonic()
        model.learn(total_timesteps=timesteps)
        seconds = time.monotonic() - start
        venv.close()
        space = model.action_space
        space.seed(0)
        assert isinstance(space, gym.Space)
        trained = evaluate(url, lambda o: model.predict(o, deterministic=kind == "mujoco")[0], kind, eval_steps)
        rand = evaluate(url, lambda o: space.sample(), kind, eval_steps)
    return {
        "target": spec["target"],
        "timesteps": timesteps,
        "train_seconds": round(seconds, 1),
        "steps_per_second": round(timesteps / seconds, 1),
        "trained": {"mean": statistics.mean(trained), "returns": trained},
        "random": {"mean": statistics.mean(rand), "returns": rand},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=sorted(TASKS), action="append", help="Task(s) to run (default: both).")
    ap.add_argument("--timesteps", type=int, default=None, help="Training steps (default: per task).")
    ap.add_argument("--eval-steps", type=int, default=2000, help="Cap on an evaluation episode's steps.")
    ap.add_argument("--out", type=Path, default=Path("build/sb3-simulators"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # two cores: one for the server, one for the learner
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for kind in args.only or sorted(TASKS):
        results[kind] = run(kind, args.timesteps or TASKS[kind]["timesteps"], args.eval_steps)
        r = results[kind]
        print(
            f"{kind}: {r['target']} after {r['timesteps']:,} steps ({r['train_seconds']} s): "
            f"trained {r['trained']['mean']:.2f} vs random {r['random']['mean']:.2f} "
            f"(mean return, {len(EVAL_SEEDS)} seeds)",
            flush=True,
        )
    (args.out / "returns.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
