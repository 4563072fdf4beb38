"""Beyond one machine: fleets of environment servers and sessions placed across them.

* :class:`Provider` runs N servers of an environment: :class:`LocalProvider` (processes on
  this machine, the core), ``DockerProvider`` (``openenv.fleet.docker``, the ``docker``
  extra), ``RayProvider`` (``openenv.fleet.ray_provider``, the ``ray`` extra) and
  ``KubernetesProvider`` (``openenv.fleet.kubernetes_provider``, the ``kubernetes`` extra;
  manifests from :mod:`openenv.fleet.manifests` need no extra);
* :class:`FleetClient` opens sessions on the least-loaded server (``GetLoad``, RFC 0005), one
  HTTP/2 channel per server, with ``reset_batch``/``step_batch`` across them;
* :func:`fleet_status` reads each server's health and load (``openenv fleet status``).
"""

from openenv.fleet.client import FleetBatchResult, FleetClient, SyncFleetClient, WorldTicket
from openenv.fleet.local import LocalProvider
from openenv.fleet.provider import PROVIDERS, Endpoint, Provider, provider_class, provider_from_state
from openenv.fleet.status import ServerStatus, fleet_status, format_table

__all__ = [
    "PROVIDERS",
    "Endpoint",
    "FleetBatchResult",
    "FleetClient",
    "LocalProvider",
    "Provider",
    "ServerStatus",
    "SyncFleetClient",
    "WorldTicket",
    "fleet_status",
    "format_table",
    "provider_class",
    "provider_from_state",
]
