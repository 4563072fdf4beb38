"""``mujoco:ENV_ID``: Gymnasium's MuJoCo locomotion and manipulation tasks as openenv environments.

The same adapter as ``gymnasium:`` (spaces as tensors, seeds honoured, the registered time limit
as ``max_episode_steps``), plus what a physics simulator needs:

* **Exact spaces.** Every curated task's action space is a box with the same bounds on every
  joint (``[-1, 1]``, Humanoid's ``[-0.4, 0.4]``, InvertedPendulum's ``[-3, 3]``, Pusher's
  ``[-2, 2]``) and its observation an unbounded ``float64`` vector, so the declared tensors
  carry them exactly (``catalog/tests/test_simulators.py`` compares them with Gymnasium's).
* **Options** (the handshake's) are ``gymnasium.make`` keywords (``{"ctrl_cost_weight": 0.1}``,
  ``{"reset_noise_scale": 0}``), and ``width``/``height`` size the rendered frame (default
  256x256). An option that would change the declared spaces (e.g.
  ``exclude_current_positions_from_observation``) is refused, and so are ``xml_file`` (a path
  on the server) and ``render_mode``.
* **A frame on request.** ``render()`` (the ``/web`` playground's picture, ``openenv.render`` on
  ``/ws``) is the scene as an ``(H, W, 3)`` ``uint8`` array, drawn offscreen by MuJoCo's
  OpenGL renderer; trainers that never ask never pay for it. The backend is ``MUJOCO_GL``, EGL
  by default (Mesa's software EGL renders headless, no display or GPU needed); a machine with
  no usable OpenGL answers ``render`` with ``UNAVAILABLE`` and steps as usual.

Install with ``pip install 'protoenv-catalog[mujoco]'`` (the ``mujoco`` wheel bundles the
simulator; ``imageio`` is what Gymnasium's renderer imports).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, ClassVar

import numpy as np

import openenv
from openenv.spaces import SpaceError, declaration, space_converter
from openenv_catalog.importers import ImporterUnavailable
from openenv_catalog.importers.gymnasium import GymnasiumEnvironment

__all__ = ["CURATED", "MujocoEnvironment", "load"]

CURATED = (
    "Ant-v5",
    "HalfCheetah-v5",
    "Hopper-v5",
    "Humanoid-v5",
    "HumanoidStandup-v5",
    "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5",
    "Pusher-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Walker2d-v5",
)

#: Options never passed to ``gymnasium.make``: a model file on the server, the render mode
#: (always ``rgb_array``, rendered only on request).
REFUSED_OPTIONS = frozenset({"xml_file", "render_mode"})
DEFAULT_FRAME = (256, 256)  # (width, height) of a rendered frame
MAX_FRAME = 2048


def _gym() -> Any:
    # EGL renders offscreen without a display; MuJoCo reads MUJOCO_GL when its renderer loads.
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import gymnasium
        import mujoco
    except ImportError as e:
        raise ImporterUnavailable(f"mujoco is not installed: pip install 'protoenv-catalog[mujoco]' ({e})") from e
    # MuJoCo's warnings (e.g. a model attribute it deprecates) go to the log, not to a
    # MUJOCO_LOG.TXT it would otherwise write in the working directory.
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warn)
    return gymnasium


def _warn(message: str) -> None:
    logging.getLogger("openenv_catalog.mujoco").warning("MuJoCo: %s", message)


def _same_space(a: Any, b: Any) -> bool:
    return bool(a == b) and getattr(a, "dtype", None) == getattr(b, "dtype", None)


class MujocoEnvironment(GymnasiumEnvironment):
    """Base of the imported MuJoCo tasks (one subclass per id, made by :func:`load`)."""

    env_id: ClassVar[str] = ""
    max_sessions = 16

    def __init__(self, **options: Any) -> None:
        openenv.Environment.__init__(self, **options)
        bad = sorted(REFUSED_OPTIONS & set(options))
        if bad:
            raise openenv.InvalidArgument(f"option {', '.join(bad)} is not accepted by {self.env_id}")
        kwargs = dict(options)
        width, height = kwargs.pop("width", DEFAULT_FRAME[0]), kwargs.pop("height", DEFAULT_FRAME[1])
        for label, v in (("width", width), ("height", height)):
            if isinstance(v, bool) or not isinstance(v, int) or not 16 <= v <= MAX_FRAME:
                raise openenv.InvalidArgument(f"{label} must be an integer from 16 to {MAX_FRAME}, got {v!r}")
        gym = _gym()
        # What a seeded reset remakes the environment with (GymnasiumEnvironment.reset).
        self.make_options = {"render_mode": "rgb_array", "width": width, "height": height, **kwargs}
        try:
            self.env = gym.make(self.env_id, **self.make_options)
        except Exception as e:  # noqa: BLE001 - a bad keyword, value or model: the client's options
            raise openenv.InvalidArgument(f"bad options for {self.env_id}: {e}") from None
        reference = gym.spec(self.env_id)
        probe_obs, probe_act = type(self).spaces()
        for what, got, want in (
            ("observation", self.env.observation_space, probe_obs),
            ("action", self.env.action_space, probe_act),
        ):
            if not _same_space(got, want):
                self.env.close()
                raise openenv.InvalidArgument(
                    f"these options change {reference.id}'s {what} space ({want} -> {got}); the catalog entry "
                    "declares the registered one"
                )
        if options:  # a bad value may only show when the model moves: try it here, once
            try:
                self.env.reset(seed=0)
                self.env.step(np.zeros(probe_act.shape, dtype=probe_act.dtype))
            except Exception as e:  # noqa: BLE001 - the options' fault, said at the handshake
                self.env.close()
                raise openenv.InvalidArgument(f"bad options for {self.env_id}: {e}") from None
        self.last_obs: Any = None
        self._render_lock = threading.Lock()

    _SPACES: ClassVar[tuple[Any, Any] | None] = None

    @classmethod
    def spaces(cls) -> tuple[Any, Any]:
        """The registered (observation, action) spaces, as :func:`load` read them."""
        assert cls._SPACES is not None
        return cls._SPACES

    def render(self) -> Any:
        with self._render_lock:
            try:
                frame = self.env.render()
            except Exception as e:  # noqa: BLE001 - no OpenGL here (no EGL/OSMesa): say so, keep stepping
                raise openenv.Unavailable(
                    f"{self.env_id} cannot render here (MUJOCO_GL={os.environ.get('MUJOCO_GL')}): {e}"
                ) from None
        return frame


def load(env_id: str) -> type[MujocoEnvironment]:
    """The environment class of ``env_id`` (a Gymnasium id whose entry point is MuJoCo's)."""
    gym = _gym()
    try:
        spec = gym.spec(env_id)
    except Exception as e:  # noqa: BLE001 - gymnasium raises several error types for a bad id
        raise LookupError(f"gymnasium has no environment {env_id!r}: {e}") from None
    if "mujoco" not in str(spec.entry_point):
        raise LookupError(f"{env_id!r} is not a MuJoCo environment (entry point {spec.entry_point}); use gymnasium:")
    try:
        probe = gym.make(env_id)
    except Exception as e:  # noqa: BLE001 - a missing asset or a simulator too old for the model
        raise LookupError(f"gymnasium cannot make {env_id!r}: {e}") from None
    try:
        obs_space, act_space = probe.observation_space, probe.action_space
        sample = act_space.sample() * 0  # the zero torque: a valid, deterministic example
        action_conv = space_converter(act_space, "action")
        observation_conv = space_converter(obs_space, "observation")
    except SpaceError as e:
        raise LookupError(f"{env_id}: {e}") from None
    finally:
        probe.close()
    name = "mujoco-" + re.sub(r"[^a-z0-9]+", "-", env_id.lower()).strip("-")
    attrs: dict[str, Any] = {
        "name": name,
        "env_id": env_id,
        "version": str(getattr(gym, "__version__", "0")),
        "description": f"MuJoCo's {env_id} (Gymnasium): joint torques in, body state out; frames on request.",
        "action_type": declaration(act_space),
        "observation_type": declaration(obs_space),
        "max_episode_steps": spec.max_episode_steps,
        "reward_range": None,
        "action_conv": action_conv,
        "observation_conv": observation_conv,
        "example_actions": (action_conv.from_gym(sample),),
        "metadata": {"source": f"mujoco:{env_id}", "kind": "simulator", "render": "rgb"},
        "_SPACES": (obs_space, act_space),
    }
    return type(f"Mujoco_{re.sub(r'[^A-Za-z0-9]', '_', env_id)}", (MujocoEnvironment,), attrs)
