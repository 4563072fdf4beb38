"""The standard gRPC health check of an environment server (``grpc.health.v1``)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["check_health"]


def check_health(target: str, service: str = "", timeout: float = 3.0) -> str:
    """The gRPC health status name of ``service`` at ``target`` (host:port): ``SERVING``,
    ``NOT_SERVING``, ... or the failed call's code name (``UNAVAILABLE``, ...)."""
    with grpc.insecure_channel(target) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as e:
            return str(e.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))
