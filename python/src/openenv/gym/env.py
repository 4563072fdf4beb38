"""``gymnasium.Env`` and ``gymnasium.vector.VectorEnv`` over an environment server.

:class:`GymEnv` holds one session (a blocking :class:`openenv.EnvClient`); :class:`GymVectorEnv`
holds ONE vectorised session of N instances (:class:`openenv.VectorEnvClient`), stepped with
one ``batch_step`` message each way. Spaces come from the advertised TypeSpecs
(:mod:`openenv.gym.spaces`).

What you may rely on:

* ``reset(seed=s)`` sends seed ``s`` (and seeds ``np_random``, as Gymnasium asks); an unseeded
  ``reset()`` lets the environment choose, exactly as the vector adapter's autoresets do, so a
  ``SyncVectorEnv`` of :func:`make` adapters and :func:`make_vec` play the same episodes.
* ``step`` returns Gymnasium's 5-tuple; a step without a reward (``None`` on the wire) counts as
  ``0.0`` with ``info["reward_missing"] = True``; ``info`` holds the time step's metadata, its
  ``reward_breakdown`` (a dict) when the environment has a rubric, and ``step_count``; the
  episode's id (fresh on every reset, so kept out of ``info``, which Gymnasium wants
  deterministic) is ``env.episode_id``.
* ``render()``: ``"rgb_array"`` when the observation is (or holds) an HxWx3/4 ``uint8`` image,
  ``"ansi"`` when it is (or holds) text; and, for an environment served in this process
  (``gymnasium.make("openenv/<name>")`` without ``url``) whose class has a render hook
  (:meth:`openenv.Environment.render`: MuJoCo, Atari, Gymnasium's classic control, ...), both,
  from that hook: ``"rgb_array"`` returns its RGB(A) array (PNG bytes decoded with Pillow),
  ``"ansi"`` its text; a render of another kind raises ``ValueError`` naming it. So
  ``gymnasium.wrappers.RecordVideo`` records MuJoCo and grey Atari entries (the ``video`` extra
  brings moviepy, which it writes with). Other render modes are refused at construction. A
  remote server's render hook is reached only by ``/ws``'s ``openenv.render`` frame (the web
  page's): gRPC has no render request.
* A multi-agent world (RFC 0012) is played by one policy for every agent: each ``step`` acts
  for the agent to act. In a simultaneous world each ``step`` gives the action of the next
  agent to act; the world steps (``step_agents``) once each has one, and the steps before it
  return that next agent's view, reward 0 and ``info["agent_to_act"]``.
* ``example_actions()``: the environment's advertised example actions
  (``TypeSpec.examples``) as elements of ``action_space``: a tool environment's tool calls.
* The vector env's autoreset mode is Gymnasium's, carried by the protocol's (RFC 0002):
  ``metadata["autoreset_mode"]`` says which.
* ``env.spec`` is set (``openenv/remote`` with the target and keywords; ``nondeterministic``,
  since an unseeded reset is the environment's choice), so ``env.spec.make()`` opens another session like it
  and Gymnasium's ``check_env`` runs every check; ``gymnasium.make("openenv/...")`` works
  too (:mod:`openenv.gym.registration`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from openenv.client import EnvClient, SyncEnvClient, VectorEnvClient
from openenv.client.env import BaseEnvClient
from openenv.gym.spaces import Converter, converter
from openenv.protocol import StepResult
from openenv.runtime.codec import message_class, tensor_from_proto
from openenv.v1 import payload_pb2
from openenv.values import from_value

__all__ = ["GymEnv", "GymVectorEnv", "autoreset", "make", "make_vec", "remote_spec"]

_AUTORESET = {
    AutoresetMode.NEXT_STEP: "next_step",
    AutoresetMode.SAME_STEP: "same_step",
    AutoresetMode.DISABLED: "disabled",
}


_C = TypeVar("_C", bound=BaseEnvClient)


def _client(cls: type[_C], target: str, **kwargs: Any) -> _C:
    """A client of ``target``: a URL, or ``docker:IMAGE`` (a container the client owns)."""
    if target.startswith("docker:"):
        out: _C = cls.from_docker_image(target[len("docker:") :], **kwargs)
        return out
    return cls(target, **kwargs)


def _info(r: StepResult[Any]) -> dict[str, Any]:
    info: dict[str, Any] = dict(r.metadata or {})
    info["step_count"] = r.step_count
    if r.reward_breakdown is not None:
        info["reward_breakdown"] = r.reward_breakdown.to_dict()
    if r.reward is None:
        info["reward_missing"] = True
    return info


def _frame_mode(space: gym.Space[Any]) -> tuple[str | None, str | None]:
    """(render mode, Dict key or None) of the frames an observation space carries."""
    candidates: list[tuple[str | None, gym.Space[Any]]] = [(None, space)]
    if isinstance(space, gym.spaces.Dict):
        candidates += list(space.spaces.items())
    for key, s in candidates:
        if isinstance(s, gym.spaces.Box) and s.dtype == np.uint8 and len(s.shape) == 3 and s.shape[-1] in (3, 4):
            return "rgb_array", key
    for key, s in candidates:
        if isinstance(s, gym.spaces.Text) or (
            isinstance(s, gym.spaces.Sequence) and isinstance(s.feature_space, gym.spaces.Text)
        ):
            return "ansi", key
    return None, None


def _frame_array(value: Any, name: str) -> np.ndarray:
    """An RGB(A) ``uint8`` array of a render hook's value (an array, nested lists, PNG bytes)."""
    if isinstance(value, (bytes, bytearray)):
        try:
            from PIL import Image
        except ImportError as e:  # pragma: no cover - Pillow comes with gymnasium's users' stacks
            raise ValueError(f"{name} renders PNG images: decoding them needs Pillow (pip install pillow): {e}") from e
        with Image.open(io.BytesIO(bytes(value))) as im:
            return np.asarray(im.convert("RGBA" if im.mode in ("RGBA", "LA", "P") else "RGB"))
    if isinstance(value, str):
        raise ValueError(f"{name} renders text or SVG, not an RGB array: use render_mode='ansi'")
    arr = np.asarray(value)
    if arr.ndim != 3 or arr.shape[-1] not in (3, 4):
        raise ValueError(f"{name} rendered an array of shape {arr.shape}, not (height, width, 3 or 4)")
    return arr.astype(np.uint8, copy=False)


def _decode_example(ex: payload_pb2.Payload, info: Any) -> Any:
    """An advertised example payload as the plain client decodes it (JSON, array, message)."""
    kind = ex.WhichOneof("kind")
    if kind == "json":
        return from_value(ex.json)
    if kind == "tensor":
        return tensor_from_proto(ex.tensor)
    msg = message_class(info.descriptors, ex.message.type_url.rsplit("/", 1)[-1])()
    ex.message.Unpack(msg)
    return msg


def _connected(client: BaseEnvClient | SyncEnvClient) -> SyncEnvClient:
    return client if isinstance(client, SyncEnvClient) else client.sync().connect()


class GymEnv(gym.Env[Any, Any]):
    """One environment instance as a ``gymnasium.Env`` (see :func:`make`)."""

    def __init__(
        self,
        client: EnvClient | SyncEnvClient,
        *,
        render_mode: str | None = None,
        reset_options: Any = None,
        on_close: Callable[[], None] | None = None,
        frames: Callable[[], Any] | None = None,
    ) -> None:
        """``client``: an :class:`openenv.EnvClient` (connected here) or a connected
        :class:`~openenv.client.SyncEnvClient`; ``on_close`` runs after the session closes
        (e.g. stopping a server this adapter owns); ``frames``, when given, returns the
        session's render (:meth:`openenv.Environment.render`) for ``render()``."""
        self._on_close = on_close
        self._frames = frames
        self._sync: SyncEnvClient = _connected(client)
        try:
            info = client.info
            assert info is not None
            self.env_info = info
            self._act: Converter = converter(info.action, info.descriptors, "action")
            self._obs: Converter = converter(info.observation, info.descriptors, "observation")
        except BaseException:
            self.close()
            raise
        self.action_space = self._act.space
        self.observation_space = self._obs.space
        mode, self._frame_key = _frame_mode(self.observation_space)
        modes = [mode] if mode else []
        if frames is not None:  # the render hook: frames and text
            modes = ["rgb_array", "ansi"]
        self.metadata = {"render_modes": modes, "render_fps": 4}
        if render_mode is not None and render_mode not in modes:
            self.close()
            raise ValueError(
                f"render_mode {render_mode!r} is not offered: {info.name}'s observations "
                + (f"render as {mode!r}" if mode else "carry no frames or text")
                + " (and no render hook is reachable: that takes an environment served in this process)"
            )
        self.render_mode = render_mode
        self.reset_options = reset_options
        self._last: Any = None
        self._result: StepResult[Any] | None = None
        self._pending: dict[str, Any] = {}
        self.episode_id = ""
        cap = info.capabilities
        self.spec: EnvSpec | None = None  # make() and gymnasium.make() set it
        if cap.HasField("reward_min") and cap.HasField("reward_max"):
            self.reward_range = (cap.reward_min, cap.reward_max)

    @property
    def client(self) -> SyncEnvClient:
        """The blocking client of the session (list_tools, state, ... are there)."""
        return self._sync

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        opts = dict(options or self.reset_options or {})
        task_id = opts.pop("task_id", None)
        r = self._sync.reset(seed, None, opts or None, task_id=None if task_id is None else str(task_id))
        self._last = self._obs.to_gym(r.observation)
        self.episode_id = r.episode_id
        self._result, self._pending = r, {}
        return self._last, _info(r)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        r = self._result
        if r is not None and len(r.to_act) > 1:
            to_act = [a for a in r.to_act if a not in self._pending]
            # A simultaneous world (RFC 0012) played by one policy: one step per agent to act;
            # the world steps (step_agents) when each has an action; until then the next one's view.
            self._pending[to_act[0]] = self._act.from_gym(action)
            if len(to_act) > 1:
                view = r.agents.get(to_act[1])
                if view is not None and view.observation is not None:
                    self._last = self._obs.to_gym(view.observation)
                return self._last, 0.0, False, False, {"step_count": r.step_count, "agent_to_act": to_act[1]}
            actions, self._pending = self._pending, {}
            r = self._sync.step_agents(actions)
        else:
            r = self._sync.step(self._act.from_gym(action))
        self._result = r
        self._last = self._obs.to_gym(r.observation)
        self.episode_id = r.episode_id
        return self._last, float(r.reward or 0.0), r.terminated, r.truncated, _info(r)

    def render(self) -> Any:
        if self.render_mode is None or self._last is None:
            return None
        obs_mode, _ = _frame_mode(self.observation_space)
        if self._frames is not None and self.render_mode != obs_mode:
            value = self._frames()
            if self.render_mode == "rgb_array":
                return _frame_array(value, self.env_info.name)
            if not isinstance(value, str):
                raise ValueError(f"{self.env_info.name} renders {type(value).__name__}, not text: use 'rgb_array'")
            return value
        frame = self._last if self._frame_key is None else self._last[self._frame_key]
        if self.render_mode == "ansi":
            return frame if isinstance(frame, str) else "\n".join(frame)
        return np.asarray(frame)

    def example_actions(self) -> list[Any]:
        """The environment's advertised example actions (``TypeSpec.examples``), each an
        element of ``action_space`` (a tool environment's example tool calls); empty when it
        advertises none."""
        return [self._act.to_gym(_decode_example(ex, self.env_info)) for ex in self.env_info.action.examples]

    def close(self) -> None:
        """Close the session (and what ``on_close`` stops); closing again does nothing."""
        try:
            self._sync.close()
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()
        super().close()


class GymVectorEnv(gym.vector.VectorEnv[Any, Any, Any]):
    """N instances in ONE vectorised session as a ``gymnasium.vector.VectorEnv`` (see :func:`make_vec`)."""

    def __init__(
        self,
        client: VectorEnvClient | SyncEnvClient,
        autoreset_mode: AutoresetMode,
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._on_close = on_close
        self._sync: SyncEnvClient = _connected(client)
        vector = self._sync.client
        assert isinstance(vector, VectorEnvClient)
        try:
            info = vector.info
            assert info is not None
            self.env_info = info
            self._act = converter(info.action, info.descriptors, "action")
            self._obs = converter(info.observation, info.descriptors, "observation")
        except BaseException:
            self.close_extras()
            raise
        self.num_envs = vector.num_envs
        self.single_action_space = self._act.space
        self.single_observation_space = self._obs.space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.metadata = {"autoreset_mode": autoreset_mode}

    @property
    def client(self) -> SyncEnvClient:
        return self._sync

    def _batch(self, observations: Sequence[Any]) -> Any:
        items = [self._obs.to_gym(o) for o in observations]
        out: Any = create_empty_array(self.single_observation_space, self.num_envs)
        return concatenate(self.single_observation_space, items, out)

    def _infos(self, results: Sequence[StepResult[Any]]) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        for i, r in enumerate(results):
            infos = self._add_info(infos, _info(r), i)
        return infos

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed if seed is None or isinstance(seed, int) else int(seed[0]))
        if isinstance(seed, int):
            seeds: list[int] = [seed]
        elif seed is not None:
            seeds = [int(s) for s in seed]
        else:
            seeds = []
        opts = dict(options or {})
        task_ids = opts.pop("task_ids", None) or ([opts.pop("task_id")] if "task_id" in opts else [])
        b = self._sync.reset_batch((), seeds, options=opts or None, task_ids=[str(t) for t in task_ids])
        return self._batch(b.observations), self._infos(b.results)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        single = gym.vector.utils.iterate(self.action_space, actions)
        b = self._sync.step_batch([self._act.from_gym(a) for a in single])
        infos = self._infos(b.results)
        if b.final:  # SAME_STEP: Gymnasium's final_obs / final_info
            final_obs = np.full(self.num_envs, None, dtype=object)
            final_info = np.full(self.num_envs, None, dtype=object)
            mask = np.zeros(self.num_envs, dtype=bool)
            for i, r in b.final.items():
                final_obs[i] = self._obs.to_gym(r.observation)
                final_info[i] = _info(r)
                mask[i] = True
            infos["final_obs"], infos["_final_obs"] = final_obs, mask
            infos["final_info"], infos["_final_info"] = final_info, mask.copy()
            terminated = np.array(
                [b.final[i].terminated if i in b.final else r.terminated for i, r in enumerate(b.results)], dtype=bool
            )
            truncated = np.array(
                [b.final[i].truncated if i in b.final else r.truncated for i, r in enumerate(b.results)], dtype=bool
            )
            rewards = np.array(
                [float((b.final[i] if i in b.final else r).reward or 0.0) for i, r in enumerate(b.results)]
            )
        else:
            terminated, truncated = b.terminated, b.truncated
            rewards = np.nan_to_num(b.rewards, nan=0.0)
        return self._batch(b.observations), rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        try:
            self._sync.close()
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()


def make(
    target: str,
    *,
    render_mode: str | None = None,
    reset_options: Mapping[str, Any] | None = None,
    client_class: type[EnvClient] = EnvClient,
    **handshake: Any,
) -> GymEnv:
    """A ``gymnasium.Env`` playing the environment at ``target`` (``grpc://host:port``, an
    ``http(s)://`` URL of the HTTP side, or ``docker:IMAGE``). ``handshake`` keywords are the
    client's (``options={...}`` for the environment factory, ``timeout``, ...). Raises
    :class:`openenv.gym.SpaceError` when a declared type maps to no space."""
    env = GymEnv(_client(client_class, target, **handshake), render_mode=render_mode, reset_options=reset_options)
    kwargs: dict[str, Any] = {"url": target, **handshake}
    if reset_options is not None:
        kwargs["reset_options"] = dict(reset_options)
    if client_class is not EnvClient:
        kwargs["client_class"] = client_class
    env.spec = remote_spec(kwargs)
    return env


def remote_spec(kwargs: Mapping[str, Any]) -> EnvSpec:
    """The ``EnvSpec`` of an adapter of a running server (``openenv/remote``): ``spec.make()``
    opens another session of it. ``nondeterministic``: always, in Gymnasium's sense (an
    unseeded ``reset()`` is the environment's choice, not drawn from the adapter's
    ``np_random``), so ``check_env`` skips its reset-determinism checks."""
    return EnvSpec(
        id="openenv/remote",
        entry_point="openenv.gym.registration:make_remote",
        vector_entry_point="openenv.gym.registration:make_remote_vec",
        nondeterministic=True,
        order_enforce=False,
        disable_env_checker=True,
        kwargs=dict(kwargs),
    )


def autoreset(mode: AutoresetMode | str) -> AutoresetMode:
    """Gymnasium's ``AutoresetMode`` from itself, its value (``"SameStep"``) or its name in any
    case (``"same_step"``, as the protocol spells it)."""
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        try:
            return AutoresetMode[str(mode).upper()]
        except KeyError:
            raise ValueError(f"autoreset_mode {mode!r}: use one of next_step, same_step, disabled") from None


def make_vec(
    target: str,
    num_envs: int,
    *,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    **handshake: Any,
) -> GymVectorEnv:
    """A ``gymnasium.vector.VectorEnv`` of ``num_envs`` instances in ONE vectorised session
    (``batch_reset``/``batch_step``), with Gymnasium's ``autoreset_mode`` (NEXT_STEP by default)
    carried by the protocol's."""
    mode = autoreset(autoreset_mode)
    client = _client(VectorEnvClient, target, num_envs=num_envs, autoreset_mode=_AUTORESET[mode], **handshake)
    assert isinstance(client, VectorEnvClient)
    return GymVectorEnv(client, mode)
