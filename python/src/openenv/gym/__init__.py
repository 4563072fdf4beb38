"""Gymnasium adapters (the ``gym`` extra: ``pip install 'protoenv[gym]'``).

::

    import openenv.gym

    env = openenv.gym.make("grpc://127.0.0.1:50051")            # a gymnasium.Env
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

    envs = openenv.gym.make_vec("grpc://127.0.0.1:50051", num_envs=16)   # one vectorised session

Spaces come from the environment's advertised TypeSpecs (:mod:`openenv.gym.spaces`);
docs/training.md has the whole story.
"""

from openenv.gym.env import GymEnv, GymVectorEnv, make, make_vec
from openenv.gym.spaces import Converter, SpaceError, converter

__all__ = ["Converter", "GymEnv", "GymVectorEnv", "SpaceError", "converter", "make", "make_vec"]
