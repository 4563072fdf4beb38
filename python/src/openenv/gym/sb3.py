"""Stable-Baselines3's ``VecEnv`` over ONE vectorised session (the ``rl`` extra).

::

    from stable_baselines3 import PPO
    from openenv.gym import SB3VecEnv

    venv = SB3VecEnv.make("grpc://127.0.0.1:50051", num_envs=16)        # any URL, or docker:IMAGE
    PPO("MlpPolicy", venv).learn(100_000)

:class:`SB3VecEnv` drives a :class:`openenv.gym.GymVectorEnv` in Gymnasium's ``SAME_STEP``
autoreset mode, which is SB3's convention: when instance ``i`` ends, the observation returned
for it is the next episode's first, and its info holds ``terminal_observation`` (the last one)
and ``TimeLimit.truncated``; ``episode`` (``{"r": return, "l": length, "t": seconds}``) is added
as SB3's ``Monitor`` would, so SB3 logs ``rollout/ep_rew_mean`` with no wrapper. Rewards are
``float32``, a step without a reward counts 0. ``seed(s)`` (which SB3's models call) seeds the
next reset: instance ``k`` gets ``s + k``.

Observations are passed as the adapter's spaces make them; a space SB3's policies cannot take
(``Text``, ``Sequence``, a ``Dict`` holding them) needs ``transform``: a function of ONE
instance's observation returning an array of ``observation_space`` (e.g. one-hot planes of a
text maze), applied to every observation, terminal ones included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from openenv.gym.env import GymVectorEnv, make_vec

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """An SB3 ``VecEnv`` of ``venv``'s instances (see the module docstring)."""

    def __init__(
        self,
        venv: GymVectorEnv,
        *,
        transform: Callable[[Any], Any] | None = None,
        observation_space: gym.Space[Any] | None = None,
    ) -> None:
        if venv.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise ValueError("SB3VecEnv needs a vector env in SAME_STEP autoreset mode (SB3's): use SB3VecEnv.make")
        if (transform is None) != (observation_space is None):
            raise ValueError("give transform and observation_space together (the space of what transform returns)")
        self.venv = venv
        self.transform = transform
        super().__init__(venv.num_envs, observation_space or venv.single_observation_space, venv.single_action_space)
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._started = time.monotonic()

    @classmethod
    def make(
        cls,
        target: str,
        num_envs: int,
        *,
        transform: Callable[[Any], Any] | None = None,
        observation_space: gym.Space[Any] | None = None,
        **handshake: Any,
    ) -> SB3VecEnv:
        """``num_envs`` instances of the environment at ``target`` in one vectorised session
        (:func:`openenv.gym.make_vec` keywords: ``options={...}``, ``timeout``, ...)."""
        venv = make_vec(target, num_envs, autoreset_mode=AutoresetMode.SAME_STEP, **handshake)
        try:
            return cls(venv, transform=transform, observation_space=observation_space)
        except BaseException:
            venv.close()
            raise

    # ---- observations -------------------------------------------------------------------

    def _one(self, obs: Any) -> Any:
        return obs if self.transform is None else self.transform(obs)

    def _batch(self, obs: Any) -> VecEnvObs:
        if self.transform is None:
            return cast(VecEnvObs, obs)
        singles = gym.vector.utils.iterate(self.venv.observation_space, obs)
        return np.stack([np.asarray(self.transform(o)) for o in singles])

    # ---- VecEnv -------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        seeds = self._seeds
        options = next((o for o in self._options if o), None)
        seed: list[int] | None = [int(s) for s in seeds] if all(s is not None for s in seeds) else None  # type: ignore[arg-type]
        obs, _ = self.venv.reset(seed=seed, options=options)
        self._reset_seeds()
        self._reset_options()
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return self._batch(obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        assert self._actions is not None, "step_async first"
        actions, self._actions = self._actions, None
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions = actions.reshape(self.num_envs).astype(np.int64)
        obs, rewards, terminated, truncated, infos = self.venv.step(actions)
        rewards = np.asarray(rewards, dtype=np.float32)
        dones = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        self._returns += rewards
        self._lengths += 1
        out: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        finals = infos.get("final_obs")
        for i in np.flatnonzero(dones):
            if finals is not None and finals[i] is not None:
                out[i]["terminal_observation"] = self._one(finals[i])
            out[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            out[i]["episode"] = {
                "r": float(self._returns[i]),
                "l": int(self._lengths[i]),
                "t": round(time.monotonic() - self._started, 6),
            }
            self._returns[i] = 0.0
            self._lengths[i] = 0
        return self._batch(obs), rewards, dones, out

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The vector env's attribute (one session: the same for every instance)."""
        value = getattr(self.venv, attr_name) if hasattr(self.venv, attr_name) else getattr(self, attr_name)
        return [value] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
        result = getattr(self.venv, method_name)(*args, **kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: Any) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return list(indices)
