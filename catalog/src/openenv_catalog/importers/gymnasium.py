"""``gymnasium:ENV_ID``: a Gymnasium environment as an openenv environment.

Spaces become type declarations through :mod:`openenv.spaces`, the one converter that
:mod:`openenv.gym` reads them back with (so ``openenv.gym.make`` gives the original spaces
exactly: a space that would not come back is refused when the id is loaded); frames are
rendered on request (``render()``, the ``/web`` playground's picture, when the environment
has an ``rgb_array`` render mode); ``reset(seed=...)`` seeds
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
from openenv.spaces import Converter, SpaceError, declaration, space_converter
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CURATED", "KINDS", "REPRESENTATIVES", "GymnasiumEnvironment", "load"]

CURATED = (
    # toy_text
    "Blackjack-v1",
    "CliffWalking-v1",
    "CliffWalkingSlippery-v1",
    "FrozenLake-v1",
    "FrozenLake8x8-v1",
    "Taxi-v4",
    # classic_control
    "Acrobot-v1",
    "CartPole-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
    # box2d (the gymnasium extra installs Box2D)
    "BipedalWalker-v3",
    "BipedalWalkerHardcore-v3",
    "CarRacing-v3",
    "LunarLander-v3",
    "LunarLanderContinuous-v3",
)

REPRESENTATIVES = ("Blackjack-v1", "Pendulum-v1")
"""Certified in full for the importer (openenv_catalog.certify): a JSON-typed entry (a Tuple
observation, a Discrete action) and a tensor-typed one (Box observation and action)."""

KINDS = {"toy_text": "toy-text", "classic_control": "classic-control", "box2d": "box2d"}
"""The catalog kind of an id, by the Gymnasium package its entry point is in."""


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

    # Set by load(): the converters of the two spaces (openenv.spaces.space_converter).
    action_conv: ClassVar[Converter]
    observation_conv: ClassVar[Converter]
    render_modes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if "rgb_array" in self.render_modes:
            options.setdefault("render_mode", "rgb_array")
        self.make_options = dict(options)
        try:
            self.env = _gym().make(self.env_id, **options)
        except TypeError as e:
            raise openenv.InvalidArgument(f"bad options for {self.env_id}: {e}") from None
        if self.env.observation_space != self.observation_conv.space or self.env.action_space != self.action_conv.space:
            # Options that change the spaces (e.g. FrozenLake's map_name) would break the declared types.
            self.env.close()
            raise openenv.InvalidArgument(f"options {sorted(options)} change the spaces of {self.env_id}")
        self.last_obs: Any = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        if seed is not None and self.last_obs is not None:
            # A fresh instance: some keep state across episodes that a seed does not reset
            # (Box2D's world: BipedalWalker's episode after another differs in the last bits),
            # and the same seed must give the same episode whatever came before.
            self.env.close()
            self.env = _gym().make(self.env_id, **self.make_options)
        obs, info = self.env.reset(seed=seed, options=dict(options) if options else None)
        self.last_obs = obs
        return openenv.StepResult(self.observation_conv.from_gym(obs), metadata=_plain_info(info))

    def step(self, action: Any) -> openenv.StepResult:
        try:
            act = self.action_conv.to_gym(action)
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise openenv.InvalidAction(f"{action!r} is not an action of {self.env_id}: {e}") from None
        if not self.env.action_space.contains(act):
            raise openenv.InvalidAction(f"{action!r} is not in the action space {self.env.action_space}")
        obs, reward, terminated, truncated, info = self.env.step(act)
        self.last_obs = obs
        return openenv.StepResult(
            self.observation_conv.from_gym(obs),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            metadata=_plain_info(info),
        )

    def render(self) -> Any:
        """The current frame (an RGB array), when the environment renders ``rgb_array``."""
        if self.env.render_mode != "rgb_array":
            return super().render()
        if self.last_obs is None:
            return "(no frame before the first reset)"
        return self.env.render()

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
    """The environment class of ``env_id`` (any id registered with Gymnasium whose spaces
    the contract represents exactly)."""
    gym = _gym()
    try:
        spec = gym.spec(env_id)
        probe = gym.make(env_id)
    except gym.error.DependencyNotInstalled as e:
        raise ImportError(f"gymnasium's {env_id} needs a package that is not installed: {e}") from None
    except Exception as e:  # noqa: BLE001 - gymnasium raises several error types for a bad id
        raise LookupError(f"gymnasium has no usable environment {env_id!r}: {e}") from None
    try:
        action_conv = space_converter(probe.action_space, "action")
        observation_conv = space_converter(probe.observation_space, "observation")
        action_type = declaration(probe.action_space)
        observation_type = declaration(probe.observation_space)
        probe.action_space.seed(0)
        sample = probe.action_space.sample()
        render_modes = tuple(probe.metadata.get("render_modes") or ())
    except SpaceError as e:
        raise LookupError(f"gymnasium's {env_id}: {e}") from None
    finally:
        probe.close()
    name = "gymnasium-" + re.sub(r"[^a-z0-9]+", "-", env_id.lower()).strip("-")
    package = str(spec.entry_point).split(":")[0].split(".")
    kind = next((KINDS[p] for p in package if p in KINDS), "classic-rl")
    attrs: dict[str, Any] = {
        "name": name,
        "env_id": env_id,
        "version": str(getattr(gym, "__version__", "0")),
        "description": f"Gymnasium's {env_id}, imported: its spaces exactly, seeds honoured, frames on request.",
        "action_type": action_type,
        "observation_type": observation_type,
        "action_conv": action_conv,
        "observation_conv": observation_conv,
        "render_modes": render_modes,
        "max_episode_steps": spec.max_episode_steps,
        "reward_range": None,
        "example_actions": (action_conv.from_gym(sample),),
        "metadata": {"source": f"gymnasium:{env_id}", "kind": kind},
    }
    return type(f"Gymnasium_{re.sub(r'[^A-Za-z0-9]', '_', env_id)}", (GymnasiumEnvironment,), attrs)
