"""The standard gRPC health check of an environment server (``grpc.health.v1``)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from openenv.security import grpc_channel_credentials

__all__ = ["check_health"]


def check_health(
    target: str,
    service: str = "",
    timeout: float = 3.0,
    *,
    tls_ca: str | None = None,
    client_cert: tuple[str, str] | None = None,
    server_name: str | None = None,
) -> str:
    """The gRPC health status name of ``service`` at ``target`` (host:port): ``SERVING``,
    ``NOT_SERVING``, ... or the failed call's code name (``UNAVAILABLE``, ...). ``tls_ca``:
    the server speaks TLS, verified against this CA file (``client_cert``: for mutual TLS;
    ``server_name``: the name its certificate must carry, when not the target's host)."""
    if tls_ca is not None:
        cert, key = client_cert or (None, None)
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else None
        channel = grpc.secure_channel(target, grpc_channel_credentials(tls_ca, cert, key), options=options)
    else:
        channel = grpc.insecure_channel(target)
    with channel as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as e:
            return str(e.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))
