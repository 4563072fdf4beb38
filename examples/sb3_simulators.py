#!/usr/bin/env python3
"""A benchmark, not a test: Stable-Baselines3 learns a MuJoCo task and an Atari game a little,
through the wire, and the trained policy's return is reported beside a random policy's.

Each task is served by ``openenv serve import:...`` in its own process; PPO trains on 8
(``--envs``) instances in ONE vectorised session (``openenv.gym.SB3VecEnv``, RFC 0002), then
the trained and a uniformly random policy play the same fixed seeds (one session, seeded resets):

* ``mujoco``: ``import:mujoco:InvertedPendulum-v5`` (MlpPolicy; the return is the number of
  steps the pole stays up, at most 1,000);
* ``atari``: ``import:ale:Breakout`` (84x84 grey frames, 4 stacked by SB3's ``VecFrameStack``,
  CnnPolicy; sticky actions on, as the catalog serves it). Training applies the rest of SB3's
  ``AtariWrapper`` client-side (:class:`AtariTraining`: a lost life ends the training episode,
  rewards clipped to their sign); evaluation plays whole games (5 lives, raw score, the policy
  sampled), each capped at ``--eval-steps`` steps.

    python examples/sb3_simulators.py --only mujoco --timesteps 20000
    python examples/sb3_simulators.py --only atari --timesteps 200000 --minutes 26 --out build/sb3-sim

``--minutes`` stops training after that wall time (the steps done are reported). Writes
``returns.json`` under ``--out``: per task, the timesteps, the wall time and both policies'
returns (each seed's, their mean and population standard deviation). docs/training.md quotes
a run.
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

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnvWrapper

from openenv.gym import SB3VecEnv

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


class _Lives(gym.vector.VectorWrapper):
    """Keeps the last ``lives`` of each game (the Atari entries' metadata, in the vector info)."""

    lives: np.ndarray | None = None

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.lives = np.asarray(info["lives"]) if "lives" in info else None
        return obs, info

    def step(self, actions: Any) -> Any:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self.lives = np.asarray(info["lives"]) if "lives" in info else None
        return obs, rewards, terminated, truncated, info


class AtariTraining(VecEnvWrapper):
    """The training half of SB3's ``AtariWrapper``, applied client-side to a vectorised session
    (the server already skips frames and serves 84x84 grey): a lost life ends the *training*
    episode (``terminal_on_life_loss``: the value learns that losing the ball is bad; the game
    goes on, its next frame is the next "episode"'s first), and rewards are clipped to their
    sign. Evaluation plays whole games with raw rewards."""

    def __init__(self, venv: SB3VecEnv, lives: _Lives) -> None:
        super().__init__(venv)
        self._lives = lives
        self._before = np.zeros(venv.num_envs, dtype=np.int64)

    def reset(self) -> Any:
        obs = self.venv.reset()
        self._before = np.array(self._lives.lives) if self._lives.lives is not None else self._before * 0
        return obs

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        now = self._lives.lives
        if now is not None:
            lost = (now < self._before) & ~dones
            for i in np.flatnonzero(lost):
                infos[i] = {**infos[i], "terminal_observation": obs[i], "TimeLimit.truncated": False}
            dones = dones | lost
            self._before = np.array(now)
        return obs, np.sign(rewards).astype(np.float32), dones, infos


class _Budget(BaseCallback):
    """Stops learning after ``minutes`` of wall time; prints the training games' mean return."""

    def __init__(self, minutes: float | None) -> None:
        super().__init__()
        self.deadline = time.monotonic() + minutes * 60 if minutes else None
        self.shown = 0

    def _on_step(self) -> bool:
        if self.num_timesteps - self.shown >= 10_000:
            self.shown = self.num_timesteps
            games = [e["r"] for e in self.model.ep_info_buffer or []]
            mean = f"{statistics.mean(games):.2f} over the last {len(games)} games" if games else "no game over yet"
            print(f"  {self.num_timesteps:,} steps: training return {mean}", flush=True)
        return self.deadline is None or time.monotonic() < self.deadline


def run(kind: str, timesteps: int, eval_steps: int, envs: int, minutes: float | None = None) -> dict[str, Any]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecFrameStack

    from openenv.gym import make_vec

    spec = TASKS[kind]
    with serve(spec["target"]) as url:
        inner = _Lives(make_vec(url, envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
        venv: Any = SB3VecEnv(inner)
        if kind == "atari":
            venv = VecFrameStack(AtariTraining(venv, inner), STACK)
            kwargs: dict[str, Any] = {"n_steps": 128, "n_epochs": 4, "batch_size": 256, "learning_rate": 2.5e-4}
            kwargs |= {"clip_range": 0.1, "ent_coef": 0.01, "vf_coef": 0.5}
        else:
            kwargs = {"n_steps": 256, "batch_size": 64, "learning_rate": 1e-3}
        model = PPO(spec["policy"], venv, seed=0, device="cpu", verbose=0, **kwargs)
        start = time.monotonic()
        model.learn(total_timesteps=timesteps, callback=_Budget(minutes))
        timesteps = model.num_timesteps
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
        "envs": envs,
        "train_seconds": round(seconds, 1),
        "steps_per_second": round(timesteps / seconds, 1),
        "trained": {"mean": statistics.mean(trained), "std": statistics.pstdev(trained), "returns": trained},
        "random": {"mean": statistics.mean(rand), "std": statistics.pstdev(rand), "returns": rand},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=sorted(TASKS), action="append", help="Task(s) to run (default: both).")
    ap.add_argument("--timesteps", type=int, default=None, help="Training steps (default: per task).")
    ap.add_argument("--eval-steps", type=int, default=2000, help="Cap on an evaluation episode's steps.")
    ap.add_argument("--minutes", type=float, default=None, help="Stop training after this wall time.")
    ap.add_argument("--envs", type=int, default=8, help="Instances in the training session.")
    ap.add_argument("--eval-seeds", type=int, default=10, help="Evaluation episodes (seeds 1000, 1001, ...).")
    ap.add_argument("--out", type=Path, default=Path("build/sb3-simulators"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # two cores: one for the server, one for the learner
    args.out.mkdir(parents=True, exist_ok=True)
    EVAL_SEEDS[:] = range(1000, 1000 + args.eval_seeds)
    results = {}
    for kind in args.only or sorted(TASKS):
        results[kind] = run(kind, args.timesteps or TASKS[kind]["timesteps"], args.eval_steps, args.envs, args.minutes)
        r = results[kind]
        print(
            f"{kind}: {r['target']} after {r['timesteps']:,} steps ({r['train_seconds']} s): "
            f"trained {r['trained']['mean']:.2f} ± {r['trained']['std']:.2f} vs random "
            f"{r['random']['mean']:.2f} ± {r['random']['std']:.2f} (mean ± std of the return, {len(EVAL_SEEDS)} seeds)",
            flush=True,
        )
    (args.out / "returns.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
