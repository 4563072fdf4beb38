"""PettingZoo over a remote multi-agent world (RFC 0012): ``AECEnv`` and ``ParallelEnv``.

::

    from openenv.pettingzoo import aec_env, parallel_env

    env = aec_env("grpc://127.0.0.1:50051")          # a PettingZoo AECEnv (turn-based or not)
    env.reset(seed=1)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else policy(obs))

    par = parallel_env("grpc://127.0.0.1:50051")     # a PettingZoo ParallelEnv
    observations, infos = par.reset(seed=1)

Each adapter holds one self-play session (it acts for every agent) of the server's environment.
:class:`RemoteAECEnv` drives turn-based worlds natively (``agent_selection`` is the agent to
act, rewards are accumulated as PettingZoo's ``last()`` wants, done agents leave through dead
steps); :class:`RemoteParallelEnv` drives simultaneous worlds natively (one joint step per
``step``). :func:`aec_env` and :func:`parallel_env` give either API for either mode, through
PettingZoo's own conversions (``parallel_to_aec``, ``turn_based_aec_to_parallel``). Spaces come
from the advertised types (:mod:`openenv.gym.spaces`), each agent's own when the server declares
one (``AgentSpec.action`` / ``observation``, RFC 0016); an ``action_mask`` in a dict observation
is an ``int8`` array, as ``Discrete.sample(mask)`` needs, and a dict view that lists its
``legal_actions`` over a ``Discrete`` action space (OpenSpiel's, the catalog's games) gains the
``action_mask`` they make. ``infos`` are each agent's own metadata (``AgentStep.metadata``).
Needs the ``pettingzoo`` extra.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec, turn_based_aec_to_parallel

from openenv.client import BaseEnvClient, EnvClient, SyncEnvClient
from openenv.gym.spaces import Converter, converter
from openenv.protocol import StepResult
from openenv.v1 import environment_pb2, multiagent_pb2

__all__ = ["RemoteAECEnv", "RemoteParallelEnv", "aec_env", "parallel_env"]


def _connected(client: str | BaseEnvClient | SyncEnvClient, kwargs: Mapping[str, Any]) -> tuple[SyncEnvClient, bool]:
    """A connected blocking client, and whether this adapter owns (closes) it."""
    if isinstance(client, str):
        return EnvClient(client, **kwargs).sync().connect(), True
    if isinstance(client, SyncEnvClient):
        return client, False
    return client.sync().connect(), False


def _masked(conv: Converter) -> Converter:
    """``action_mask`` of a Dict observation as an int8 Box (what ``Discrete.sample(mask)`` takes)."""
    space = conv.space
    if not (isinstance(space, gym.spaces.Dict) and isinstance(space.spaces.get("action_mask"), gym.spaces.Box)):
        return conv
    old = space.spaces["action_mask"]
    assert isinstance(old, gym.spaces.Box)
    spaces = dict(space.spaces)
    spaces["action_mask"] = gym.spaces.Box(0, 1, old.shape, np.int8)
    to_gym = conv.to_gym

    def cast(value: Any) -> Any:
        out = to_gym(value)
        out["action_mask"] = np.asarray(out["action_mask"], dtype=np.int8)
        return out

    return Converter(gym.spaces.Dict(spaces), cast, conv.from_gym)


def _mask_from_legal(conv: Converter, action: gym.Space[Any]) -> Converter:
    """A Dict view with ``legal_actions`` and no ``action_mask``, over a ``Discrete`` action space:
    the view gains ``action_mask`` (int8, 1 for each legal action), what PettingZoo's tools and
    ``Discrete.sample(mask)`` read."""
    space = conv.space
    if not (
        isinstance(space, gym.spaces.Dict)
        and "legal_actions" in space.spaces
        and "action_mask" not in space.spaces
        and isinstance(action, gym.spaces.Discrete)
    ):
        return conv
    n, start = int(action.n), int(action.start)
    spaces = dict(space.spaces)
    spaces["action_mask"] = gym.spaces.Box(0, 1, (n,), np.int8)
    to_gym = conv.to_gym

    def with_mask(value: Any) -> Any:
        out = to_gym(value)
        mask = np.zeros(n, dtype=np.int8)
        for a in (value or {}).get("legal_actions") or ():
            if start <= int(a) < start + n:
                mask[int(a) - start] = 1
        out["action_mask"] = mask
        return out

    def without_mask(value: Any) -> Any:
        value = dict(value)
        value.pop("action_mask", None)
        return conv.from_gym(value)

    return Converter(gym.spaces.Dict(spaces), with_mask, without_mask)


class _Remote:
    """What both adapters share: the session, the spaces and the decoded per-agent parts."""

    def __init__(self, client: str | BaseEnvClient | SyncEnvClient, client_kwargs: Mapping[str, Any]) -> None:
        self.client, self._owned = _connected(client, client_kwargs)
        info = self.client.info
        spec = self.client.multi_agent
        if info is None or spec is None:
            if self._owned:
                self.client.close()
            raise ValueError("the server's environment is not a multi-agent environment (RFC 0012)")
        self.env_info: environment_pb2.EnvironmentInfo = info
        self.spec: multiagent_pb2.MultiAgentSpec = spec
        self.possible_agents: list[str] = [a.id for a in spec.agents]
        # Each agent's own types when the server declares them (RFC 0016), else the shared ones
        # (made once, and only when some agent has no type of its own: a shared anyOf has no space).
        shared: dict[str, Converter] = {}

        def of(role: str, own: Any, has_own: bool) -> Converter:
            if has_own:
                return converter(own, info.descriptors, role)
            if role not in shared:
                shared[role] = converter(getattr(info, role), info.descriptors, role)
            return shared[role]

        self._acts: dict[str, Converter] = {}
        self._obss: dict[str, Converter] = {}
        for agent in spec.agents:
            act = of("action", agent.action, agent.HasField("action"))
            obs = of("observation", agent.observation, agent.HasField("observation"))
            self._acts[agent.id] = act
            self._obss[agent.id] = _mask_from_legal(_masked(obs), act.space)
        # One space object per agent, the same on every call (PettingZoo's space seeding).
        self.observation_spaces = {a: self._obss[a].space for a in self.possible_agents}
        self.action_spaces = {a: self._acts[a].space for a in self.possible_agents}
        self.last_result: StepResult[Any] | None = None

    def action_of(self, agent: str, action: Any) -> Any:
        """A gym action of ``agent`` as the value the server takes."""
        return self._acts[agent].from_gym(action)

    def _views(self, r: StepResult[Any]) -> dict[str, Any]:
        return {a: self._obss[a].to_gym(s.observation) for a, s in r.agents.items() if s.observation is not None}

    def _close_client(self) -> None:
        if self._owned:
            self._owned = False
            self.client.close()


class RemoteAECEnv(AECEnv[str, Any, Any]):  # type: ignore[misc]
    """A turn-based remote world as a PettingZoo ``AECEnv`` (one self-play session).

    ``client``: a URL (a session this adapter opens and closes; ``client_kwargs`` go to
    :class:`openenv.EnvClient`), or a client of a multi-agent server (connected here if needed;
    the caller closes it). ``env.client`` is the blocking client (``state()`` and the like).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "openenv_remote_aec", "render_modes": [], "is_parallelizable": True}

    def __init__(self, client: str | BaseEnvClient | SyncEnvClient, **client_kwargs: Any) -> None:
        super().__init__()
        self._remote = _Remote(client, client_kwargs)
        if self._remote.spec.mode == multiagent_pb2.TURN_MODE_SIMULTANEOUS:
            self._remote._close_client()
            raise ValueError("a simultaneous world: use RemoteParallelEnv, or aec_env() (PettingZoo's parallel_to_aec)")
        self.possible_agents = list(self._remote.possible_agents)
        self.agents: list[str] = []
        self.render_mode = None
        self.rewards: dict[str, float] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        self._observations: dict[str, Any] = {}
        self.agent_selection = self.possible_agents[0]

    @property
    def client(self) -> SyncEnvClient:
        """The blocking client of the session."""
        return self._remote.client

    @functools.cache  # noqa: B019 - one space object per agent, as PettingZoo asks
    def observation_space(self, agent: str) -> gym.Space[Any]:
        return self._remote.observation_spaces[agent]

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> gym.Space[Any]:
        return self._remote.action_spaces[agent]

    def _absorb(self, r: StepResult[Any]) -> None:
        self._remote.last_result = r
        self._observations.update(self._remote._views(r))
        for agent, part in r.agents.items():
            if agent not in self.agents:
                continue
            self.rewards[agent] = float(part.reward or 0.0)
            self.terminations[agent] = bool(part.terminated)
            self.truncations[agent] = bool(part.truncated)
            self.infos[agent] = dict(part.metadata)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        r = self.client.reset(seed, None, options or None)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._observations = {}
        self._absorb(r)
        self._accumulate_rewards()
        self.agent_selection = r.to_act[0] if r.to_act else self.agents[0]
        self._deads_step_first()

    def observe(self, agent: str) -> Any:
        return self._observations.get(agent)

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations.get(agent) or self.truncations.get(agent):
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        r = self.client.step(self._remote.action_of(agent, action), agent_id=agent)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._absorb(r)
        self._accumulate_rewards()
        if r.to_act:
            self.agent_selection = r.to_act[0]
        self._deads_step_first()

    def state(self) -> Any:
        """The world's state (the environment's ``state()``)."""
        return self.client.state().state

    def render(self) -> None:
        return None

    def close(self) -> None:
        self._remote._close_client()


class RemoteParallelEnv(ParallelEnv[str, Any, Any]):  # type: ignore[misc]
    """A simultaneous remote world as a PettingZoo ``ParallelEnv`` (one self-play session); the
    arguments are :class:`RemoteAECEnv`'s."""

    metadata: ClassVar[dict[str, Any]] = {"name": "openenv_remote_parallel", "render_modes": []}

    def __init__(self, client: str | BaseEnvClient | SyncEnvClient, **client_kwargs: Any) -> None:
        self._remote = _Remote(client, client_kwargs)
        if self._remote.spec.mode != multiagent_pb2.TURN_MODE_SIMULTANEOUS:
            self._remote._close_client()
            raise ValueError("a turn-based world: use RemoteAECEnv, or parallel_env() (turn_based_aec_to_parallel)")
        self.possible_agents = list(self._remote.possible_agents)
        self.agents: list[str] = []
        self.render_mode = None

    @property
    def client(self) -> SyncEnvClient:
        """The blocking client of the session."""
        return self._remote.client

    @functools.cache  # noqa: B019
    def observation_space(self, agent: str) -> gym.Space[Any]:
        return self._remote.observation_spaces[agent]

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> gym.Space[Any]:
        return self._remote.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        r = self.client.reset(seed, None, options or None)
        self._remote.last_result = r
        self.agents = [a for a in self.possible_agents if not r.agents[a].done]
        return self._remote._views(r), {a: dict(r.agents[a].metadata) for a in self.possible_agents}

    def step(
        self, actions: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        live = list(self.agents)
        r = self.client.step_agents({a: self._remote.action_of(a, x) for a, x in actions.items()})
        self._remote.last_result = r
        views = self._remote._views(r)
        parts = {a: r.agents[a] for a in live}
        self.agents = [a for a in live if not parts[a].done]
        return (
            {a: views[a] for a in live if a in views},
            {a: float(p.reward or 0.0) for a, p in parts.items()},
            {a: bool(p.terminated) for a, p in parts.items()},
            {a: bool(p.truncated) for a, p in parts.items()},
            {a: dict(p.metadata) for a, p in parts.items()},
        )

    def state(self) -> Any:
        """The world's state (the environment's ``state()``)."""
        return self.client.state().state

    def render(self) -> None:
        return None

    def close(self) -> None:
        self._remote._close_client()


def aec_env(client: str | BaseEnvClient | SyncEnvClient, **client_kwargs: Any) -> AECEnv[str, Any, Any]:
    """A PettingZoo ``AECEnv`` of any remote world: :class:`RemoteAECEnv` for a turn-based one,
    PettingZoo's ``parallel_to_aec`` of :class:`RemoteParallelEnv` for a simultaneous one."""
    sync, owned = _connected(client, client_kwargs)
    try:
        if _mode(sync) == multiagent_pb2.TURN_MODE_SIMULTANEOUS:
            par = RemoteParallelEnv(sync)
            par._remote._owned = owned
            return parallel_to_aec(par)
        aec = RemoteAECEnv(sync)
        aec._remote._owned = owned
        return aec
    except BaseException:
        if owned:
            sync.close()
        raise


def parallel_env(client: str | BaseEnvClient | SyncEnvClient, **client_kwargs: Any) -> ParallelEnv[str, Any, Any]:
    """A PettingZoo ``ParallelEnv`` of any remote world: :class:`RemoteParallelEnv` for a
    simultaneous one, PettingZoo's ``turn_based_aec_to_parallel`` of :class:`RemoteAECEnv` for a
    turn-based one."""
    sync, owned = _connected(client, client_kwargs)
    try:
        if _mode(sync) == multiagent_pb2.TURN_MODE_SIMULTANEOUS:
            par = RemoteParallelEnv(sync)
            par._remote._owned = owned
            return par
        aec = RemoteAECEnv(sync)
        aec._remote._owned = owned
        return turn_based_aec_to_parallel(aec)
    except BaseException:
        if owned:
            sync.close()
        raise


def _mode(client: SyncEnvClient) -> int:
    spec = client.multi_agent
    if spec is None:
        raise ValueError("the server's environment is not a multi-agent environment (RFC 0012)")
    return int(spec.mode)
