"""``gymnasium.make("openenv/...")``: openenv environments in Gymnasium's registry.

Importing :mod:`openenv.gym` registers (or call :func:`register_envs`):

* ``openenv/remote``: a session of a running server, ``gymnasium.make("openenv/remote",
  url="grpc://127.0.0.1:50051")`` (any URL :func:`openenv.gym.make` takes, plus its keywords);
  ``gymnasium.make_vec("openenv/remote", num_envs=16, vectorization_mode="vector_entry_point",
  url=...)`` is :func:`openenv.gym.make_vec` (one vectorised session);
* ``openenv/<name>`` for every certified catalog environment (protoenv-catalog's
  ``certified.json``: ``openenv/gridworld``, ``openenv/gymnasium-cartpole-v1``,
  ``openenv/reasoning-gym-maze``, ...): served in this process by the protocol engine
  (:mod:`openenv.testing`, no socket), or, with ``url=...``, the same environment on a server.

Without importing :mod:`openenv.gym` first, name the module in the id, as Gymnasium allows:
``gymnasium.make("openenv.gym:openenv/remote", url=...)``. Every environment made so has
``env.spec`` (Gymnasium's ``check_env`` then runs its checks without the "no spec" warning);
its ``nondeterministic`` is true: an unseeded ``reset()`` is the environment's choice (as in
the vector adapter's autoresets), not drawn from the adapter's ``np_random``.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from anyio.from_thread import start_blocking_portal
from gymnasium.vector import AutoresetMode

from openenv.client import EnvClient, SyncEnvClient, VectorEnvClient
from openenv.gym.env import _AUTORESET, GymEnv, GymVectorEnv, autoreset, make, make_vec
from openenv.runtime.environment import Environment
from openenv.testing import InProcessServer

__all__ = [
    "NAMESPACE",
    "catalog_names",
    "make_catalog",
    "make_catalog_vec",
    "make_remote",
    "make_remote_vec",
    "register_envs",
]

NAMESPACE = "openenv"


def make_remote(url: str | None = None, **kwargs: Any) -> GymEnv:
    """``gymnasium.make("openenv/remote", url=...)``: :func:`openenv.gym.make` of ``url``."""
    if not url:
        raise ValueError(
            'openenv/remote needs the server\'s URL: gymnasium.make("openenv/remote", url="grpc://HOST:PORT")'
        )
    return make(url, **kwargs)


def make_remote_vec(num_envs: int = 1, url: str | None = None, **kwargs: Any) -> GymVectorEnv:
    """``gymnasium.make_vec("openenv/remote", num_envs, vectorization_mode="vector_entry_point",
    url=...)``: :func:`openenv.gym.make_vec` (one vectorised session)."""
    if not url:
        raise ValueError('openenv/remote needs the server\'s URL: url="grpc://HOST:PORT"')
    kwargs.pop("render_mode", None)
    return make_vec(url, num_envs, **kwargs)


def _factory(target: str) -> Any:
    """The environment class (or factory) of ``module:Class`` or ``import:SOURCE:ID``."""
    if target.startswith("python:"):
        target = target.removeprefix("python:")
    if target.startswith("import:"):
        source, _, ident = target.removeprefix("import:").partition(":")
        importers = {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.importers")}
        if source not in importers:
            raise gym.error.Error(f"{target}: no importer {source!r} is installed (pip install protoenv-catalog)")
        return importers[source].load()(ident)
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class _Served:
    """An environment served in this process (the protocol engine, no socket) on a private
    event loop, for the adapter that owns it."""

    def __init__(self, target: str) -> None:
        factory = _factory(target)
        self._cm = start_blocking_portal("asyncio")
        self.portal = self._cm.__enter__()
        try:
            self.server: InProcessServer = self.portal.call(self._start, factory)
        except BaseException:
            self._cm.__exit__(None, None, None)
            raise
        # An adapter left open at exit would hang the interpreter (its portal's generator is
        # finalized after its thread is gone): close it while the thread still runs.
        atexit.register(self.close)
        self._closed = False

    @staticmethod
    async def _start(factory: Any) -> InProcessServer:
        return await InProcessServer(factory).start()

    def client(self, client_cls: type[EnvClient], **kwargs: Any) -> SyncEnvClient:
        return SyncEnvClient(self.server.client(client_cls, **kwargs), portal=self.portal).connect()

    def renders(self) -> bool:
        """Whether the environment's class has a render hook."""
        return self.server.runtime.env_cls.render is not Environment.render

    def render(self) -> Any:
        """The render of the (one) session of this server: the adapter's."""
        sessions = list(self.server.manager.sessions.values())
        if len(sessions) != 1:
            raise RuntimeError(f"the adapter's server has {len(sessions)} sessions, not 1")
        return self.portal.call(sessions[0].render)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        try:
            self.portal.call(self.server.stop)
        finally:
            self._cm.__exit__(None, None, None)


def make_catalog(
    *,
    name: str,
    target: str,
    url: str | None = None,
    render_mode: str | None = None,
    reset_options: Any = None,
    **handshake: Any,
) -> GymEnv:
    """``gymnasium.make("openenv/<name>")``: the catalog environment ``name`` (``target`` is
    what ``openenv serve`` takes), served in this process, or played on the server at ``url``."""
    if url:
        return make(url, render_mode=render_mode, reset_options=reset_options, **handshake)
    served = _Served(target)
    try:
        client = served.client(EnvClient, **handshake)
    except BaseException:
        served.close()
        raise
    return GymEnv(
        client,
        render_mode=render_mode,
        reset_options=reset_options,
        on_close=served.close,
        frames=served.render if served.renders() else None,
    )


def make_catalog_vec(
    num_envs: int = 1,
    *,
    name: str,
    target: str,
    url: str | None = None,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    **handshake: Any,
) -> GymVectorEnv:
    """``gymnasium.make_vec("openenv/<name>", num_envs, vectorization_mode="vector_entry_point")``:
    ``num_envs`` instances of the catalog environment in ONE vectorised session."""
    handshake.pop("render_mode", None)
    if url:
        return make_vec(url, num_envs, autoreset_mode=autoreset_mode, **handshake)
    mode = autoreset(autoreset_mode)
    served = _Served(target)
    try:
        client = served.client(VectorEnvClient, num_envs=num_envs, autoreset_mode=_AUTORESET[mode], **handshake)  # type: ignore[arg-type]
    except BaseException:
        served.close()
        raise
    return GymVectorEnv(client, mode, on_close=served.close)


def catalog_names() -> dict[str, dict[str, Any]]:
    """The certified catalog environments, ``name -> record`` (``target``, ...), read from
    protoenv-catalog's ``certified.json`` without importing any of them; empty when
    protoenv-catalog is not installed."""
    spec = importlib.util.find_spec("openenv_catalog")
    if spec is None or not spec.submodule_search_locations:
        return {}
    for location in spec.submodule_search_locations:
        path = Path(location) / "certified.json"
        try:
            data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("target"), str)}
    return {}


def register_envs() -> list[str]:
    """Register ``openenv/remote`` and ``openenv/<name>`` for every certified catalog
    environment in Gymnasium's registry (again: nothing changes); returns the ids."""
    ids = [f"{NAMESPACE}/remote"]
    _register(ids[0], make_remote, make_remote_vec, kwargs={})
    for name, record in sorted(catalog_names().items()):
        env_id = f"{NAMESPACE}/{name}"
        target = str(record["target"]).removeprefix("python:")
        kwargs = {"name": name, "target": target}
        _register(env_id, make_catalog, make_catalog_vec, kwargs=kwargs)
        ids.append(env_id)
    return ids


def _register(
    env_id: str,
    entry: Callable[..., Any],
    vector: Callable[..., Any],
    *,
    kwargs: dict[str, Any],
) -> None:
    if env_id in gym.registry:
        return
    gym.register(
        env_id,
        entry_point=f"{entry.__module__}:{entry.__name__}",
        vector_entry_point=f"{vector.__module__}:{vector.__name__}",
        nondeterministic=True,  # see the module docstring
        # The server ends episodes (max_episode_steps, truncated): no TimeLimit on top; the
        # adapter validates what crosses the wire, so no checker wrapper either.
        disable_env_checker=True,
        kwargs=kwargs,
    )
