"""The Docker engine through its CLI, as container mode uses it: a command, an image's id.

Apart from :mod:`harbor_env.container` so that the task and compose parsers (which ask whether
an image is on this engine) need nothing of the containers that import them.
"""

from __future__ import annotations

import subprocess

from harbor_env.errors import TaskError

__all__ = ["docker", "docker_available", "image_id"]


def docker(
    *args: str, input: bytes | None = None, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """``docker ARGS`` (its output captured); RuntimeError naming the command when it fails and
    ``check``; :class:`TaskError` when there is no docker CLI."""
    try:
        r = subprocess.run(["docker", *args], input=input, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise TaskError("container mode needs the docker CLI and a Docker engine; `docker` is not on PATH") from None
    if check and r.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {r.stderr.decode(errors='replace').strip()[-1500:]}")
    return r


def docker_available() -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        r = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"no Docker engine: {e}"
    return None if r.returncode == 0 else f"no Docker engine: {r.stderr.decode(errors='replace').strip()[-300:]}"


def image_id(ref: str) -> str | None:
    """The id of image ``ref`` on this engine, None when it holds no such image."""
    r = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False, timeout=60)
    return r.stdout.decode().strip() or None if r.returncode == 0 else None
