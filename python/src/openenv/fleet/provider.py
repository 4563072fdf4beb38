"""The provider interface: start N environment servers, find them, stop them.

A provider runs the servers of one environment on some substrate (local processes, Docker
containers, Ray actors, Kubernetes pods). Every provider speaks the same small interface, so
:class:`~openenv.fleet.FleetClient`, ``openenv fleet`` and the tests treat them alike:

* :meth:`Provider.up` starts ``replicas`` servers and returns once each answers gRPC health
  (``SERVING``), reporting progress through a callback;
* :meth:`Provider.endpoints` lists the servers that run now, after restarts (a restarted
  server may have a new address: clients re-read this list);
* :meth:`Provider.heal` replaces servers that died (Ray and Kubernetes do it by themselves;
  it then only re-reads them);
* :meth:`Provider.down` stops every server and frees what the provider created;
* :meth:`Provider.state` / :func:`provider_from_state`: a JSON document naming what runs, so
  another process (``openenv fleet status`` / ``down``) can find and stop the fleet.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

__all__ = ["PROVIDERS", "Endpoint", "Progress", "Provider", "provider_class", "provider_from_state"]

Progress = Callable[[str], None]
"""Receives one line of progress per event (``"server 2/4 serving at grpc://..."``)."""

# name -> "module:Class"; imported on use, so a missing extra fails alone and names itself.
PROVIDERS: dict[str, str] = {
    "local": "openenv.fleet.local:LocalProvider",
    "docker": "openenv.fleet.docker:DockerProvider",
    "ray": "openenv.fleet.ray_provider:RayProvider",
    "kubernetes": "openenv.fleet.kubernetes_provider:KubernetesProvider",
}


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One environment server of a fleet."""

    #: Stable within the fleet (``local-0``, the container's or the actor's name, a pod name).
    name: str
    #: Where its gRPC side listens: ``grpc://host:port``.
    url: str
    #: Where it runs (a pid, a container id, a Ray node id, a node name), for ``status``.
    where: str = ""
    #: The bearer token the server requires (RFC 0003; e.g. a docker provider's container's
    #: own); empty: none, or the fleet client's. Never printed nor written by ``to_json``.
    token: str = dataclasses.field(default="", repr=False, compare=False)

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "url": self.url, "where": self.where}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Endpoint:
        return cls(str(doc["name"]), str(doc["url"]), str(doc.get("where", "")), str(doc.get("token", "")))


def _quiet(line: str) -> None:
    return None


class Provider(abc.ABC):
    """Runs the servers of one environment; see the module's docstring."""

    #: The name ``openenv fleet up --provider`` knows it by.
    kind: ClassVar[str]

    @abc.abstractmethod
    def up(self, replicas: int, progress: Progress = _quiet) -> list[Endpoint]:
        """Start ``replicas`` servers; return once all are SERVING. On failure, stop those
        started and raise the error of the table (``Unavailable``, ``DeadlineExceeded``...)."""

    @abc.abstractmethod
    def endpoints(self) -> list[Endpoint]:
        """The servers that run now (a dead one is left out; a restarted one has its new address)."""

    def heal(self, progress: Progress = _quiet) -> list[Endpoint]:
        """Replace servers that died; return the endpoints afterwards."""
        return self.endpoints()

    @abc.abstractmethod
    def down(self, progress: Progress = _quiet) -> None:
        """Stop every server (gracefully, then forcibly) and free what ``up`` created. Idempotent."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """A JSON document that :func:`provider_from_state` turns back into this fleet."""

    @classmethod
    @abc.abstractmethod
    def from_state(cls, state: Mapping[str, Any]) -> Provider:
        """The provider of a fleet started elsewhere, from its :meth:`state`."""

    def __enter__(self) -> Provider:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()


def provider_class(kind: str) -> type[Provider]:
    """The provider class named ``kind`` (``local``, ``docker``, ``ray``, ``kubernetes``).

    Raises ValueError for an unknown name and ImportError (naming the extra to install) when
    the provider's extra is missing."""
    spec = PROVIDERS.get(kind)
    if spec is None:
        raise ValueError(f"unknown provider {kind!r}; known: {', '.join(PROVIDERS)}")
    mod, attr = spec.split(":")
    cls: type[Provider] = getattr(importlib.import_module(mod), attr)
    return cls


def provider_from_state(state: Mapping[str, Any]) -> Provider:
    """The provider that :meth:`Provider.state` described."""
    return provider_class(str(state["kind"])).from_state(state)
