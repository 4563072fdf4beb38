"""``gymnasium:ENV_ID``: a Gymnasium environment as an openenv environment.

Spaces become type declarations (:mod:`openenv_catalog.spaces`); ``reset(seed=...)`` seeds
the Gymnasium environment (same seed, same episode: ``deterministic``); the registered time
limit becomes ``max_episode_steps`` (truncation by the runtime); actions outside the action
space are refused (``INVALID_ARGUMENT``, the episode goes on). Each session owns its own
``gymnasium.make`` instance, so sessions never share state. Handshake options are passed to
``gymnasium.make`` as keyword arguments (e.g. ``{"is_slippery": false}`` for FrozenLake).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import openenv
from openenv_catalog.importers import ImporterUnavailable
from openenv_catalog.spaces import declaration, from_wire, to_wire

__all__ = ["CURATED", "GymnasiumEnvironment", "load"]

CURATED = (
    "CartPole-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Acrobot-v1",
    "Pendulum-v1",
    "FrozenLake-v1",
    "FrozenLake8x8-v1",
    "Taxi-v4",
    "CliffWalking-v1",
    "Blackjack-v1",
)


def _gym() -> Any:
    try:
        import gymnasium
    except ImportError as e:
        raise ImporterUnavailable(f"gymnasium is not installed: pip install 'protoenv-catalog[gymnasium]' ({e})") from e
    return gymnasium


class GymnasiumEnvironment(openenv.Environment):
    """Base of imported Gymnasium environments (one subclass per id, made by :func:`load`)."""

    env_id: ClassVar[str] = ""
    deterministic = True
    max_sessions = 64

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        try:
            self.env = _gym().make(self.env_id, **options)
        except TypeError as e:
            raise openenv.InvalidArgument(f"bad options for {self.env_id}: {e}") from None
        self.last_obs: Any = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        obs, info = self.env.reset(seed=seed, options=dict(options) if options else None)
        self.last_obs = obs
        return openenv.StepResult(to_wire(self.env.observation_space, obs), metadata=_plain_info(info))

    def step(self, action: Any) -> openenv.StepResult:
        act = from_wire(self.env.action_space, action)
        if not self.env.action_space.contains(act):
            raise openenv.InvalidAction(f"{action!r} is not in the action space {self.env.action_space}")
        obs, reward, terminated, truncated, info = self.env.step(act)
        self.last_obs = obs
        return openenv.StepResult(
            to_wire(self.env.observation_space, obs),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            metadata=_plain_info(info),
        )

    def state(self) -> dict[str, Any]:
        return {"env_id": self.env_id}

    def close(self) -> None:
        self.env.close()


def _plain_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """Gymnasium's ``info`` as JSON metadata (scalars and lists; anything else as text)."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if hasattr(v, "tolist"):
            v = v.tolist()
        out[str(k)] = v if isinstance(v, (bool, int, float, str, list)) or v is None else repr(v)
    return out


def load(env_id: str) -> type[GymnasiumEnvironment]:
    """The environment class of ``env_id`` (any id registered with Gymnasium)."""
    gym = _gym()
    try:
        spec = gym.spec(env_id)
        probe = gym.make(env_id)
    except Exception as e:  # noqa: BLE001 - gymnasium raises several error types for a bad id
        raise LookupError(f"gymnasium has no usable environment {env_id!r}: {e}") from None
    try:
        action_type = declaration(probe.action_space)
        observation_type = declaration(probe.observation_space)
        sample = probe.action_space.sample()
    finally:
        probe.close()
    name = "gymnasium-" + re.sub(r"[^a-z0-9]+", "-", env_id.lower()).strip("-")
    attrs: dict[str, Any] = {
        "name": name,
        "env_id": env_id,
        "version": str(getattr(gym, "__version__", "0")),
        "description": f"Gymnasium's {env_id}, imported: spaces as typed payloads, seeds honoured.",
        "action_type": action_type,
        "observation_type": observation_type,
        "max_episode_steps": spec.max_episode_steps,
        "reward_range": None,
        "example_actions": (from_wire_example(probe.action_space, sample),),
        "metadata": {"source": f"gymnasium:{env_id}", "kind": "classic-rl"},
    }
    return type(f"Gymnasium_{re.sub(r'[^A-Za-z0-9]', '_', env_id)}", (GymnasiumEnvironment,), attrs)


def from_wire_example(space: Any, sample: Any) -> Any:
    """An example action in the form the declaration takes."""
    return to_wire(space, sample)
