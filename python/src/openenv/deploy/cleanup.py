"""``openenv ps`` / ``openenv cleanup``: the containers openenv started, and removing leftovers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

from openenv.deploy.engine import GRPC_PORT, MANAGED_LABEL, Echo, docker_client
from openenv.deploy.run import owner_alive

__all__ = ["ManagedContainer", "cleanup", "list_containers"]


@dataclass(frozen=True)
class ManagedContainer:
    """A container carrying ``openenv.managed=true``."""

    id: str
    name: str
    image: str
    env: str
    session: str
    status: str
    url: str
    owner: str
    owner_alive: bool | None  # None: started from another host

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def list_containers(engine: docker.DockerClient | None = None) -> list[ManagedContainer]:
    """Every container carrying ``openenv.managed=true``, running or not."""
    dc = engine or docker_client()
    out = []
    # ignore_removed: docker-py lists ids, then inspects each; a container removed in between
    # (another client's auto-removed container, a concurrent cleanup) is skipped, not an error.
    for c in dc.containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=true"}, ignore_removed=True):
        labels = c.labels or {}
        bindings = ((c.attrs.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{GRPC_PORT}/tcp") or []
        url = f"grpc://{bindings[0]['HostIp']}:{bindings[0]['HostPort']}" if bindings else ""
        owner = labels.get("openenv.owner", "")
        out.append(
            ManagedContainer(
                c.id,
                c.name,
                labels.get("openenv.image", ""),
                labels.get("openenv.env", ""),
                labels.get("openenv.session", ""),
                c.status,
                url,
                owner,
                owner_alive(owner),
            )
        )
    return sorted(out, key=lambda m: m.name)


def cleanup(
    all_containers: bool = False,
    *,
    dry_run: bool = False,
    engine: docker.DockerClient | None = None,
    echo: Echo = print,
) -> list[ManagedContainer]:
    """Remove leftover managed containers: those whose owner process is gone (or all of them).

    Returns what was (or, with ``dry_run``, would be) removed.
    """
    dc = engine or docker_client()
    removed = []
    for m in list_containers(dc):
        if not (all_containers or m.owner_alive is False):
            continue
        removed.append(m)
        echo(f"{'would remove' if dry_run else 'removing'} {m.name} ({m.env}, {m.status})")
        if dry_run:
            continue
        try:
            c = dc.containers.get(m.id)
            if c.status == "running":
                c.stop(timeout=5)
            c.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    return removed
