"""The ``docker`` provider: N hardened containers of an environment image (the ``docker``
extra), each started by :func:`openenv.deploy.run.start_container` (every capability dropped,
no-new-privileges, read-only root, pids and memory limits, ports on 127.0.0.1 only).

The fleet is its containers' labels (``openenv.fleet=NAME``): :meth:`DockerProvider.endpoints`
asks the engine, so another process (``openenv fleet status``/``down``) sees the same fleet,
and ``openenv cleanup`` leaves fleet containers alone (their owner is the fleet, not a process).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors

from openenv.deploy.engine import GRPC_PORT, docker_client
from openenv.deploy.run import start_container
from openenv.errors import NotFound
from openenv.fleet.provider import Endpoint, Progress, Provider, _quiet
from openenv.security import TOKEN_ENV

__all__ = ["FLEET_LABEL", "DockerProvider"]

FLEET_LABEL = "openenv.fleet"


class DockerProvider(Provider):
    """Servers of ``image`` as containers. ``max_sessions`` sets each server's capacity
    (``OPENENV_MAX_SESSIONS``); ``memory``, ``cpus``, ``pids_limit`` and ``network_none`` are
    :func:`~openenv.deploy.run.start_container`'s."""

    kind = "docker"

    def __init__(
        self,
        image: str,
        *,
        name: str | None = None,
        max_sessions: int | None = None,
        memory: str | None = "1g",
        cpus: float | None = None,
        pids_limit: int | None = 512,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 120.0,
        engine: docker.DockerClient | None = None,
    ) -> None:
        self.image = image
        self.name = name or f"fleet-{uuid.uuid4().hex[:8]}"
        self.max_sessions = max_sessions
        self.memory, self.cpus, self.pids_limit = memory, cpus, pids_limit
        self.env = dict(env or {})
        if max_sessions is not None:
            self.env["OPENENV_MAX_SESSIONS"] = str(max_sessions)
        self.ready_timeout = ready_timeout
        self._engine = engine
        self._serial = 0

    @property
    def engine(self) -> docker.DockerClient:
        if self._engine is None:
            self._engine = docker_client()
        return self._engine

    def _containers(self, all_states: bool = False) -> list[Any]:
        found = self.engine.containers.list(  # ignore_removed: one removed while being listed is gone
            all=all_states, filters={"label": f"{FLEET_LABEL}={self.name}"}, ignore_removed=True
        )
        return sorted(found, key=lambda c: int((c.labels or {}).get(f"{FLEET_LABEL}.replica", "0")))

    def _start(self, n: int, progress: Progress, total: int) -> None:
        serials = list(range(self._serial, self._serial + n))
        self._serial += n

        def one(k: int) -> Any:
            return start_container(
                self.image,
                ready_timeout=self.ready_timeout,
                env=self.env,
                memory=self.memory,
                cpus=self.cpus,
                pids_limit=self.pids_limit,
                labels={FLEET_LABEL: self.name, f"{FLEET_LABEL}.replica": str(k)},
                name=f"openenv-fleet-{self.name}-{k}",
                owner=f"fleet:{self.name}:",
                engine=self.engine,
            )

        done = 0
        errors: list[BaseException] = []
        with concurrent.futures.ThreadPoolExecutor(min(8, n)) as pool:
            futures = {pool.submit(one, k): k for k in serials}
            for fut in concurrent.futures.as_completed(futures):
                try:
                    c = fut.result()
                except BaseException as e:  # noqa: BLE001 - raised below, after the others finish
                    errors.append(e)
                    continue
                done += 1
                progress(f"server {done}/{total} {c.name} serving at {c.url}")
        if errors:
            raise errors[0]

    def up(self, replicas: int, progress: Progress = _quiet) -> list[Endpoint]:
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        try:
            self.engine.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise NotFound(f"image {self.image!r} is not present locally; build it with `openenv build`") from None
        progress(f"starting {replicas} container(s) of {self.image} (fleet {self.name})")
        try:
            self._start(replicas, progress, replicas)
        except BaseException:
            self.down()
            raise
        return self.endpoints()

    def endpoints(self) -> list[Endpoint]:
        out = []
        for c in self._containers():
            if c.status != "running":
                continue
            bindings = ((c.attrs.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{GRPC_PORT}/tcp") or []
            if bindings:
                url = f"grpc://127.0.0.1:{bindings[0]['HostPort']}"
                out.append(Endpoint(c.name, url, f"container {c.id[:12]}", _container_token(c)))
        return out

    def kill(self, name: str) -> None:
        """SIGKILL container ``name`` (no drain): a crash, as its clients see it."""
        for c in self._containers():
            if c.name == name:
                c.kill()
                return
        raise NotFound(f"no running container {name!r} in fleet {self.name}")

    def heal(self, progress: Progress = _quiet) -> list[Endpoint]:
        dead = [c for c in self._containers(all_states=True) if c.status != "running"]
        if dead:
            progress(f"replacing {len(dead)} dead container(s): {', '.join(c.name for c in dead)}")
            for c in dead:
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True)
            self._start(len(dead), progress, len(dead))
        return self.endpoints()

    def down(self, progress: Progress = _quiet, grace_s: float = 10.0) -> None:
        containers = self._containers(all_states=True)

        def stop(c: Any) -> None:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                c.stop(timeout=int(grace_s))  # SIGTERM: the server drains
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True, v=True)
            progress(f"removed {c.name}")

        if containers:
            with concurrent.futures.ThreadPoolExecutor(min(8, len(containers))) as pool:
                list(pool.map(stop, containers))

    def state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "image": self.image,
            "name": self.name,
            "max_sessions": self.max_sessions,
            "serial": self._serial,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> DockerProvider:
        p = cls(str(state["image"]), name=str(state["name"]), max_sessions=state.get("max_sessions"))
        p._serial = int(state.get("serial", 0))
        return p


def _container_token(c: Any) -> str:
    """The token a container's server requires: every one has its own (start_container, RFC
    0003), in its environment, which whoever may inspect the container may read anyway."""
    for item in (c.attrs.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        if key == TOKEN_ENV:
            return value
    return ""
