"""The ``ray`` provider: environment servers as Ray actors (the ``ray`` extra).

Each server is an actor that runs an :class:`openenv.Server` (gRPC) in its own process, bound
to its node's address. Ray schedules the actors with their resource requests (``num_cpus``,
``resources``), spreads them over the nodes (``SPREAD``, or a strategy you pass) and restarts
an actor whose process or node died (``max_restarts``), on any node with room; the restarted
server has a new address, which :meth:`RayProvider.endpoints` reports and a
:class:`~openenv.fleet.FleetClient` picks up at its next poll.

::

    ray.init(address="auto")                              # an existing cluster (or none: local)
    p = RayProvider("echo_env:EchoEnvironment", num_cpus=1, max_sessions=256)
    p.up(8)
    async with FleetClient(p) as fleet: ...
    p.down()

``detached=True`` (``openenv fleet up --provider ray``) makes the actors outlive the process
that created them (named actors in the ``namespace``); ``down`` from another process finds them
by name.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import ray
import ray.exceptions

from openenv.errors import DeadlineExceeded, Unavailable
from openenv.fleet._factory import import_target
from openenv.fleet.provider import Endpoint, Progress, Provider, _quiet
from openenv.security import TokenSet
from openenv.server import Server

__all__ = ["RayProvider"]

DEFAULT_NAMESPACE = "openenv-fleet"


class EnvServerActor:
    """One environment server inside a Ray actor process. Its methods are the actor's."""

    def __init__(self, target: str, max_sessions: int | None, idle_timeout_s: float, token: str | None = None) -> None:
        host: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self._loop = asyncio.new_event_loop()
        self._server = Server(
            import_target(target),
            host,
            0,
            max_sessions=max_sessions,
            idle_timeout_s=idle_timeout_s,
            tokens=TokenSet([token] if token else []),  # RFC 0003: the node's address is reachable
        )
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._server.start())
            except BaseException as e:  # noqa: BLE001 - reported to __init__, which raises it
                failure.append(e)
                return
            finally:
                started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="openenv-server", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        bracketed = f"[{host}]" if ":" in host else host
        self._url = f"grpc://{bracketed}:{self._server.port}"
        self._node = ray.get_runtime_context().get_node_id()

    def endpoint(self) -> tuple[str, str]:
        """(url, node id) of this server."""
        return self._url, self._node

    def stop(self, grace_s: float) -> None:
        """Drain (NOT_SERVING, refuse new sessions, end the open ones) and stop listening."""
        fut = asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop)
        fut.result(grace_s + 30)


class RayProvider(Provider):
    """Servers of ``target`` (``module:Class``, importable on every node) as Ray actors.

    ``address``: the cluster (``ray.init(address=...)``); when Ray is already initialised in
    this process that connection is used; None starts a local Ray. ``num_cpus`` and
    ``resources`` are each server's resource requests; ``scheduling_strategy`` defaults to
    ``"SPREAD"``; ``max_restarts`` (-1: always) is how often Ray restarts a dead server.
    ``token``: the bearer token every server requires (RFC 0003; the servers listen on their
    node's address), carried by the endpoints so a :class:`~openenv.fleet.FleetClient` sends
    it; None: anonymous servers, for trusted networks.
    """

    kind = "ray"

    def __init__(
        self,
        target: str,
        *,
        address: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        name: str = "openenv",
        max_sessions: int | None = None,
        idle_timeout_s: float = 300.0,
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
        scheduling_strategy: Any = "SPREAD",
        max_restarts: int = -1,
        detached: bool = False,
        ready_timeout: float = 120.0,
        token: str | None = None,
    ) -> None:
        self.token = token
        self.target, self.address, self.namespace, self.name = target, address, namespace, name
        self.max_sessions, self.idle_timeout_s = max_sessions, idle_timeout_s
        self.num_cpus, self.resources = num_cpus, dict(resources or {})
        self.scheduling_strategy, self.max_restarts = scheduling_strategy, max_restarts
        self.detached, self.ready_timeout = detached, ready_timeout
        self._actors: dict[str, Any] = {}  # name -> actor handle
        self._serial = 0
        self._started_ray = False

    def _ensure_ray(self) -> None:
        if not ray.is_initialized():
            ray.init(address=self.address, namespace=self.namespace, log_to_driver=False)
            self._started_ray = self.address is None

    def _actor_class(self, name: str) -> Any:
        return ray.remote(EnvServerActor).options(
            name=name,
            num_cpus=self.num_cpus,
            resources=self.resources or None,
            scheduling_strategy=self.scheduling_strategy,
            max_restarts=self.max_restarts,
            max_concurrency=4,  # endpoint() answers while stop() drains
            namespace=self.namespace,
            lifetime="detached" if self.detached else None,
        )

    def _create(self, n: int) -> list[str]:
        names = []
        for _ in range(n):
            name = f"{self.name}-{self._serial}"
            self._serial += 1
            cls = self._actor_class(name)
            self._actors[name] = cls.remote(self.target, self.max_sessions, self.idle_timeout_s, self.token)
            names.append(name)
        return names

    def _wait(self, names: list[str], progress: Progress, total: int) -> list[Endpoint]:
        """Wait (up to ``ready_timeout``) until each named server answers; their endpoints."""
        refs = {self._actors[n].endpoint.remote(): n for n in names}
        out = []
        deadline = time.monotonic() + self.ready_timeout
        done = 0
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(
                    f"{len(pending)} Ray server(s) not started within {self.ready_timeout:g} s "
                    "(not enough resources in the cluster?)"
                )
            ready, pending = ray.wait(pending, num_returns=1, timeout=min(left, 5.0))
            for ref in ready:
                try:
                    url, node = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise Unavailable(f"Ray server {refs[ref]} failed to start: {e}") from None
                done += 1
                progress(f"server {done}/{total} {refs[ref]} serving at {url} (node {node[:12]})")
                out.append(Endpoint(refs[ref], url, f"node {node[:12]}", self.token or ""))
        return sorted(out, key=lambda ep: _serial_of(ep.name))

    def up(self, replicas: int, progress: Progress = _quiet) -> list[Endpoint]:
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        self._ensure_ray()
        progress(f"starting {replicas} Ray actor server(s) of {self.target}")
        names = self._create(replicas)
        try:
            # The endpoints the wait saw, not a fresh endpoints() call: that one leaves out a
            # server slower to answer than its short timeout, which a loaded cluster can be.
            fresh = self._wait(names, progress, replicas)
        except BaseException:
            for n in names:
                ray.kill(self._actors.pop(n), no_restart=True)
            raise
        if len(self._actors) == len(fresh):
            return fresh
        earlier = [ep for ep in self.endpoints() if ep.name not in set(names)]
        return sorted(fresh + earlier, key=lambda ep: _serial_of(ep.name))

    def endpoints(self, timeout: float = 2.0) -> list[Endpoint]:
        """The servers that answer now; one being restarted by Ray is left out until it runs."""
        if not self._actors:
            return []
        refs = {a.endpoint.remote(): n for n, a in self._actors.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        out = []
        for ref in ready:
            try:
                url, node = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # dead or restarting
            out.append(Endpoint(refs[ref], url, f"node {node[:12]}", self.token or ""))
        return sorted(out, key=lambda ep: _serial_of(ep.name))

    def heal(self, progress: Progress = _quiet) -> list[Endpoint]:
        """Replace servers Ray gave up on (restarts exhausted); Ray restarts the others itself."""
        dead = []
        for name, actor in self._actors.items():
            try:
                ray.get(actor.endpoint.remote(), timeout=self.ready_timeout)
            except ray.exceptions.RayActorError:
                dead.append(name)
            except ray.exceptions.GetTimeoutError:
                pass  # still being restarted
        if dead:
            progress(f"replacing {len(dead)} server(s) Ray gave up on: {', '.join(dead)}")
            for name in dead:
                del self._actors[name]
            self._wait(self._create(len(dead)), progress, len(dead))
        return self.endpoints()

    def down(self, progress: Progress = _quiet, grace_s: float = 10.0) -> None:
        actors, self._actors = self._actors, {}
        stops = {a.stop.remote(grace_s): n for n, a in actors.items()}
        if stops:
            ray.wait(list(stops), num_returns=len(stops), timeout=grace_s + 30)
        for name, a in actors.items():
            ray.kill(a, no_restart=True)
            progress(f"stopped {name}")
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "address": self.address,
            "namespace": self.namespace,
            "name": self.name,
            "serial": self._serial,
            "actors": sorted(self._actors),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RayProvider:
        p = cls(
            str(state["target"]),
            address=state.get("address") or "auto",
            namespace=str(state.get("namespace", DEFAULT_NAMESPACE)),
            name=str(state.get("name", "openenv")),
            detached=True,
        )
        p._ensure_ray()
        p._serial = int(state.get("serial", 0))
        for name in state.get("actors", []):
            try:
                p._actors[name] = ray.get_actor(name, namespace=p.namespace)
            except ValueError:
                continue  # gone
        return p


def _serial_of(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdecimal() else 0
