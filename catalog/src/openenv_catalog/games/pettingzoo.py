"""PettingZoo environments (AEC and Parallel) as :class:`~openenv_catalog.games.core.Game`\\ s.

The reverse of openenv's PettingZoo adapter: any PettingZoo environment served as a
multi-agent openenv environment. Agents are PettingZoo's ``possible_agents``; spaces become
openenv declarations in their JSON form (:func:`openenv.spaces.json_converter`: a ``Dict`` of an
``observation`` and an ``action_mask``, as the classic games have, is an object of arrays).

* An ``AECEnv`` is turn-based: the agent to act is PettingZoo's ``agent_selection``; the
  rewards of a step are PettingZoo's ``rewards`` after it. The "dead steps" PettingZoo asks of
  a terminated agent (``step(None)``) are taken by the game itself, so a client never sends one.
* A ``ParallelEnv`` is simultaneous: every live agent acts in each joint step.

An action outside the agent's space, or masked out by the ``action_mask`` of its observation
(or info), is refused before PettingZoo sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from openenv import spaces
from openenv_catalog.games.core import Game

__all__ = ["AECGame", "ParallelGame"]


def _mask(obs: Any, info: Any) -> Any:
    if isinstance(obs, Mapping) and "action_mask" in obs:
        return obs["action_mask"]
    if isinstance(info, Mapping) and "action_mask" in info:
        return info["action_mask"]
    return None


def _jsonable(value: Any) -> Any:
    """``value`` (a PettingZoo info: numpy arrays and scalars among plain values) as JSON-like
    data; what has no JSON form is left out."""
    if isinstance(value, Mapping):
        out = {str(k): _jsonable(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _DROP}
    if isinstance(value, (list, tuple)):
        items = [_jsonable(v) for v in value]
        return [v for v in items if v is not _DROP]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return _DROP


_DROP = object()


def _schemas(env: Any, agents: tuple[str, ...]) -> tuple[Any, Any]:
    acts = [spaces.json_schema(env.action_space(a)) for a in agents]
    obss = [spaces.json_schema(env.observation_space(a)) for a in agents]

    def one(schemas: list[Any]) -> Any:
        unique = [s for i, s in enumerate(schemas) if s not in schemas[:i]]
        return unique[0] if len(unique) == 1 else {"anyOf": unique}

    return one(acts), one(obss)


class _PettingZooGame(Game):
    factory: Callable[[], Any]

    def _setup(self, env: Any) -> None:
        self.env = env
        self.agents = tuple(str(a) for a in env.possible_agents)
        # Each agent's spaces in their JSON form (one converter, openenv.spaces).
        self._acts = {a: spaces.json_converter(env.action_space(a), f"{a}'s action") for a in self.agents}
        self._obss = {a: spaces.json_converter(env.observation_space(a), f"{a}'s observation") for a in self.agents}
        self.roles = {a: a for a in self.agents}
        self.action_type, self.observation_type = _schemas(env, self.agents)
        # RFC 0016: each agent's own spaces, when they are not all the same.
        acts = {a: spaces.json_schema(env.action_space(a)) for a in self.agents}
        obss = {a: spaces.json_schema(env.observation_space(a)) for a in self.agents}
        if any(v != acts[self.agents[0]] for v in acts.values()):
            self.agent_action_types = acts
        if any(v != obss[self.agents[0]] for v in obss.values()):
            self.agent_observation_types = obss
        self.info: dict[str, Any] = {}
        super().__init__()

    def _check(self, agent: str, action: Any, obs: Any) -> str | None:
        space = self.env.action_space(agent)
        try:
            value = self._acts[agent].to_gym(action)
            ok = bool(space.contains(value))
        except (TypeError, ValueError, KeyError, IndexError, spaces.SpaceError):
            ok = False
        if not ok:
            return f"{action!r} is not in {agent}'s action space {space}"
        mask = _mask(obs, self.info.get(agent))
        if (
            mask is not None
            and isinstance(action, int)
            and not bool(np.asarray(mask).ravel()[action - int(getattr(space, "start", 0))])
        ):
            legal = [int(i) + int(getattr(space, "start", 0)) for i in np.flatnonzero(np.asarray(mask))]
            return f"{action!r} is masked out for {agent} here; legal: {legal}"
        return None

    def legal_actions(self, agent: str) -> list[int] | None:
        mask = _mask(self._raw_obs(agent), self.info.get(agent))
        if mask is None:
            return None
        start = int(getattr(self.env.action_space(agent), "start", 0))
        return [int(i) + start for i in np.flatnonzero(np.asarray(mask))]

    def _raw_obs(self, agent: str) -> Any:
        raise NotImplementedError

    def agent_infos(self) -> dict[str, dict[str, Any]]:
        out = {}
        for agent, info in self.info.items():
            data = _jsonable(info) if isinstance(info, Mapping) else None
            if data:
                out[agent] = data
        return out

    def observe(self, agent: str) -> Any:
        return self._obss[agent].from_gym(self._raw_obs(agent))

    def close(self) -> None:
        self.env.close()


class AECGame(_PettingZooGame):
    """A PettingZoo ``AECEnv``, turn by turn."""

    def __init__(self) -> None:
        self._setup(type(self).factory())
        self.reset(None)

    def reset(self, seed: int | None) -> None:
        self.env.reset(seed=seed)
        self.terminated = dict.fromkeys(self.agents, False)
        self.truncated = dict.fromkeys(self.agents, False)
        self.info = {a: self.env.infos.get(a, {}) for a in self.env.agents}
        self._dead_steps({})

    def _dead_steps(self, rewards: dict[str, float]) -> dict[str, float]:
        """Record who is done; take PettingZoo's ``step(None)`` for each of them."""
        env = self.env
        while True:
            for a in env.agents:
                self.terminated[a] = self.terminated[a] or bool(env.terminations.get(a, False))
                self.truncated[a] = self.truncated[a] or bool(env.truncations.get(a, False))
                self.info[a] = env.infos.get(a, {})
            if not env.agents:
                for a in self.agents:  # agents gone without a flag: the world ended for them
                    if not (self.terminated[a] or self.truncated[a]):
                        self.truncated[a] = True
                return rewards
            sel = env.agent_selection
            if not (env.terminations.get(sel) or env.truncations.get(sel)):
                return rewards
            env.step(None)
            for a, r in env.rewards.items():
                rewards[str(a)] = rewards.get(str(a), 0.0) + float(r)

    def acting(self) -> list[str]:
        if not self.env.agents:
            return []
        return [str(self.env.agent_selection)]

    def _raw_obs(self, agent: str) -> Any:
        return self.env.observe(agent)

    def illegal(self, agent: str, action: Any) -> str | None:
        return self._check(agent, action, self._raw_obs(agent))

    def apply(self, actions: Mapping[str, Any]) -> dict[str, float]:
        (agent,) = self.acting()
        self.env.step(self._acts[agent].to_gym(actions[agent]))
        rewards = {a: 0.0 for a in self.agents}
        for a, r in self.env.rewards.items():
            rewards[str(a)] += float(r)
        return self._dead_steps(rewards)


class ParallelGame(_PettingZooGame):
    """A PettingZoo ``ParallelEnv``: every live agent acts at once."""

    simultaneous = True

    def __init__(self) -> None:
        self._setup(type(self).factory())
        self.obs: dict[str, Any] = {}
        self.reset(None)

    def reset(self, seed: int | None) -> None:
        obs, infos = self.env.reset(seed=seed)
        self.obs = {str(a): o for a, o in obs.items()}
        self.info = {str(a): i for a, i in infos.items()}
        self.terminated = dict.fromkeys(self.agents, False)
        self.truncated = dict.fromkeys(self.agents, False)

    def acting(self) -> list[str]:
        return [str(a) for a in self.env.agents]

    def _raw_obs(self, agent: str) -> Any:
        return self.obs[agent]  # an agent gone keeps its last view

    def illegal(self, agent: str, action: Any) -> str | None:
        return self._check(agent, action, self.obs.get(agent))

    def apply(self, actions: Mapping[str, Any]) -> dict[str, float]:
        joint = {a: self._acts[a].to_gym(actions[a]) for a in self.acting()}
        obs, rew, terms, truncs, infos = self.env.step(joint)
        self.obs.update({str(a): o for a, o in obs.items()})
        self.info.update({str(a): i for a, i in infos.items()})
        for a in self.agents:
            self.terminated[a] = self.terminated[a] or bool(terms.get(a, False))
            self.truncated[a] = self.truncated[a] or bool(truncs.get(a, False))
        if not self.env.agents:
            for a in self.agents:
                if not (self.terminated[a] or self.truncated[a]):
                    self.truncated[a] = True
        return {a: float(rew.get(a, 0.0)) for a in self.agents}
