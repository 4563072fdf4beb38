"""The Docker engine: the one place that connects to it, and the contract's fixed ports and labels."""

from __future__ import annotations

import os
from collections.abc import Callable

import docker
import docker.errors

from openenv.errors import Unavailable

__all__ = [
    "GRPC_PORT",
    "HTTP_PORT",
    "MANAGED_LABEL",
    "SANDBOX_LABEL",
    "Echo",
    "docker_client",
    "engine_available",
    "quiet",
]

GRPC_PORT = 50051
HTTP_PORT = 8000  # the HTTP/WebSocket side (OpenEnv's port)
MANAGED_LABEL = "openenv.managed"
#: Set on images whose environment runs submitted code in openenv.sandbox ([tool.openenv]
#: sandbox = true): start_container gives their containers the sandbox's security options.
SANDBOX_LABEL = "openenv.sandbox"

Echo = Callable[[str], None]
"""Receives progress lines."""


def quiet(msg: str) -> None:
    """An :data:`Echo` that says nothing."""


def docker_client(timeout: float = 120.0) -> docker.DockerClient:
    """A client of the Docker engine named by the environment (``DOCKER_HOST``, default socket).

    Raises:
        Unavailable: no engine answers (the message says where it looked).
    """
    try:
        dc = docker.from_env(timeout=int(timeout))
        dc.ping()
    except docker.errors.DockerException as e:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise Unavailable(f"cannot reach the Docker engine at {where}: {e}. Is dockerd running?") from None
    return dc


def engine_available() -> tuple[bool, str]:
    """(True, version) when a Docker engine answers, else (False, the reason)."""
    try:
        dc = docker_client(timeout=10)
    except Unavailable as e:
        return False, e.message
    try:
        return True, str(dc.version().get("Version", "?"))
    finally:
        dc.close()
