"""Gymnasium adapters (the ``gym`` extra: ``pip install 'protoenv[gym]'``).

::

    import openenv.gym

    env = openenv.gym.make("grpc://127.0.0.1:50051")            # a gymnasium.Env
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

    envs = openenv.gym.make_vec("grpc://127.0.0.1:50051", num_envs=16)   # one vectorised session

    import gymnasium

    env = gymnasium.make("openenv/remote", url="grpc://127.0.0.1:50051")   # registered on import
    env = gymnasium.make("openenv/gymnasium-cartpole-v1")                  # a catalog environment, in-process

    from openenv.gym import SB3VecEnv                                      # Stable-Baselines3 (the rl extra)
    venv = SB3VecEnv.make("grpc://127.0.0.1:50051", num_envs=16)

Spaces come from the environment's advertised TypeSpecs (:mod:`openenv.gym.spaces`);
Gymnasium registration is :mod:`openenv.gym.registration`, the SB3 adapter
:mod:`openenv.gym.sb3` (imported on first use: SB3 is only needed by who uses it);
docs/training.md has the whole story.
"""

from typing import Any

from openenv.gym.env import GymEnv, GymVectorEnv, make, make_vec
from openenv.gym.registration import register_envs
from openenv.gym.spaces import Converter, SpaceError, converter

__all__ = [
    "Converter",
    "GymEnv",
    "GymVectorEnv",
    "SB3VecEnv",
    "SpaceError",
    "converter",
    "make",
    "make_vec",
    "register_envs",
]

register_envs()


def __getattr__(name: str) -> Any:
    if name == "SB3VecEnv":  # stable-baselines3 (and torch) only when asked for
        from openenv.gym.sb3 import SB3VecEnv

        return SB3VecEnv
    raise AttributeError(f"module 'openenv.gym' has no attribute {name!r}")
