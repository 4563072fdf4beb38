#!/usr/bin/env python3
"""Classic RL through the wire: Stable-Baselines3 PPO learns gridworld over gRPC.

16 mazes are stepped in ONE vectorised session (``openenv.gym.make_vec``, RFC 0002, with
Gymnasium's SAME_STEP autoreset, which is SB3's), each 5x5 maze drawn from the episode's seed by
the server. The policy sees the maze as three one-hot planes (walls, agent, goal) read from the
observation's ``grid``. After training, the trained policy and a uniformly random one play the
same fixed seeds; the run writes ``learning_curve.png`` and ``returns.json``.

    pip install torch==2.13.0 './python[rl]' ./envs/gridworld    # from a clone's root (on no package index)
    python examples/sb3_gridworld.py --timesteps 30000 --out build/sb3     # serves gridworld itself
    python examples/sb3_gridworld.py --url grpc://127.0.0.1:50051           # or plays a running server
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecEnv

import openenv
import openenv.gym

SIZE = 5
PLANES = "#AG"  # walls, agent, goal
EVAL_SEEDS = list(range(10_000, 10_040))


def features(obs: dict[str, Any]) -> np.ndarray:
    """The maze as one-hot planes (walls, agent, goal), flattened, float32."""
    grid = obs["grid"]
    out = np.zeros((len(PLANES), SIZE, SIZE), dtype=np.float32)
    for r, row in enumerate(grid):
        for c, ch in enumerate(row):
            k = PLANES.find(ch)
            if k >= 0:
                out[k, r, c] = 1.0
    return out.reshape(-1)


class GridVecEnv(VecEnv):  # type: ignore[misc]
    """SB3's VecEnv over openenv.gym.make_vec (one vectorised gRPC session), with feature
    observations and per-episode returns kept for the learning curve."""

    def __init__(self, url: str, num_envs: int, seed: int) -> None:
        self.venv = openenv.gym.make_vec(
            url, num_envs=num_envs, autoreset_mode=AutoresetMode.SAME_STEP, options={"size": SIZE}
        )
        space = gym.spaces.Box(0.0, 1.0, (len(PLANES) * SIZE * SIZE,), np.float32)
        super().__init__(num_envs, space, self.venv.single_action_space)
        self.seed_value = seed
        self.returns = np.zeros(num_envs)
        self.episode_returns: list[float] = []
        self._actions: np.ndarray | None = None

    def _obs(self, batch: dict[str, Any]) -> np.ndarray:
        return np.stack([features({"grid": batch["grid"][i]}) for i in range(self.num_envs)])

    def reset(self) -> np.ndarray:
        obs, _ = self.venv.reset(seed=self.seed_value)
        self.returns[:] = 0
        return self._obs(obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None
        obs, rewards, terminated, truncated, infos = self.venv.step(np.asarray(self._actions, dtype=np.int64))
        dones = terminated | truncated
        self.returns += rewards
        out_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            out_infos[i]["terminal_observation"] = features(infos["final_obs"][i])
            out_infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            self.episode_returns.append(float(self.returns[i]))
            self.returns[i] = 0
        return self._obs(obs), rewards.astype(np.float32), dones, out_infos

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, attr_name)] * self.num_envs

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
        raise NotImplementedError(method_name)

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        self.seed_value = 0 if seed is None else seed
        return [self.seed_value + i for i in range(self.num_envs)]


def evaluate(url: str, act: Any, seeds: Sequence[int]) -> list[float]:
    """The return of ``act(features) -> action`` on each seeded maze (one gRPC session)."""
    env = openenv.gym.make(url, options={"size": SIZE})
    try:
        out = []
        for s in seeds:
            obs, _ = env.reset(seed=s)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(features(obs)))
                total += reward
                done = terminated or truncated
            out.append(total)
        return out
    finally:
        env.close()


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    """gridworld served on loopback in a thread, for a self-contained run."""
    from gridworld import GridWorldEnvironment

    loop = asyncio.new_event_loop()
    srv, started = openenv.Server(GridWorldEnvironment, "127.0.0.1", 0), threading.Event()

    def run() -> None:  # grpc.aio serves on the loop that started it: start it in the thread
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(60):
        raise RuntimeError("the gridworld server did not start")
    try:
        yield srv.address
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def train(url: str, timesteps: int, out: Path, seed: int = 0, num_envs: int = 16) -> dict[str, Any]:
    """Train PPO, evaluate it against a random policy, write the PNG and the JSON; return the JSON."""
    torch.set_num_threads(1)  # tiny networks: one thread beats several on a busy machine
    venv = GridVecEnv(url, num_envs, seed)
    try:
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=256, n_epochs=4, learning_rate=1e-3,
                    ent_coef=0.01, gamma=0.97, seed=seed, verbose=0, device="cpu")  # fmt: skip
        model.set_logger(Logger(None, []))  # SB3's default logger leaves an empty SB3-* dir in /tmp per run
        model.learn(total_timesteps=timesteps)
        train_returns = venv.episode_returns
    finally:
        venv.close()
    rng = np.random.default_rng(seed)
    # The stochastic policy PPO trained (a deterministic argmax can loop in a maze it half knows).
    trained = evaluate(url, lambda f: int(model.predict(f, deterministic=False)[0]), EVAL_SEEDS)
    rand = evaluate(url, lambda f: int(rng.integers(4)), EVAL_SEEDS)
    result = {
        "timesteps": timesteps,
        "num_envs": num_envs,
        "maze_size": SIZE,
        "eval_seeds": EVAL_SEEDS,
        "trained_returns": trained,
        "random_returns": rand,
        "trained_mean": statistics.mean(trained),
        "random_mean": statistics.mean(rand),
        "train_episode_returns": train_returns,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "returns.json").write_text(json.dumps(result, indent=1))
    _plot(train_returns, result, out / "learning_curve.png")
    return result


def _plot(returns: list[float], result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = 50
    smooth = np.convolve(returns, np.ones(window) / window, mode="valid") if len(returns) >= window else returns
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(returns, alpha=0.25, label="episode return")
    ax.plot(range(len(returns) - len(smooth), len(returns)), smooth, label=f"mean of {window}")
    ax.axhline(result["random_mean"], color="gray", linestyle="--", label="random policy (eval)")
    ax.axhline(result["trained_mean"], color="green", linestyle=":", label="trained policy (eval)")
    ax.set_xlabel("training episode")
    ax.set_ylabel("return")
    ax.set_title(f"PPO on gridworld {SIZE}x{SIZE} over gRPC ({result['num_envs']} envs, one session)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a gridworld server (default: serve one on loopback)")
    p.add_argument("--timesteps", type=int, default=30_000)
    p.add_argument("--out", type=Path, default=Path("build/sb3_gridworld"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server())
        result = train(url, args.timesteps, args.out, args.seed)
    print(json.dumps({k: result[k] for k in ("trained_mean", "random_mean", "timesteps")}))


if __name__ == "__main__":
    main()
