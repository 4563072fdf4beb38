"""Fixtures of the Docker tests: a real engine, the debootstrapped base, the echo image.

These tests need a Docker engine. Without one they skip with the reason, except when the
environment variable CI is set: then a missing engine fails them (CI must run them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
#: The lock every test image is built within, as CI builds the environment images (make images).
LOCK = REPO / "requirements" / "dev.txt"
ECHO_TAG = os.environ.get("OPENENV_TEST_ECHO_TAG", "openenv-echo-env:pytest")  # helpers on one engine: their own tag


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail when running in CI (where Docker tests are required)."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI is set: the Docker tests are required)", pytrace=False)
    print(f"skipping Docker tests: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Iterator[object]:
    """A docker.DockerClient of a reachable engine."""
    from openenv.deploy.engine import docker_client
    from openenv.errors import Unavailable

    try:
        dc = docker_client()
    except Unavailable as e:
        unavailable(f"no Docker engine is reachable: {e.message}")
    yield dc
    dc.close()


@pytest.fixture(scope="session")
def base_image(engine: object) -> str:
    """The offline base: openenv-base:bookworm (built when missing), else a local python:3.11-slim."""
    import docker.errors

    from openenv.deploy.baseimage import DEFAULT_BASE_TAG, ensure_base_image
    from openenv.errors import FailedPrecondition

    try:
        ensure_base_image(DEFAULT_BASE_TAG, client=engine, echo=None)
        return DEFAULT_BASE_TAG
    except FailedPrecondition as e:
        try:
            engine.images.get("python:3.11-slim")  # type: ignore[attr-defined]
            return "python:3.11-slim"
        except docker.errors.ImageNotFound:
            pytest.fail(f"no base image: cannot debootstrap ({e.message}) and python:3.11-slim is not local")


@pytest.fixture(scope="session")
def echo_image(engine: object, base_image: str) -> str:
    """envs/echo_env built offline (Docker's layer cache makes rebuilds quick)."""
    from openenv.deploy.build import build_image

    result = build_image(
        REPO / "envs" / "echo_env",
        tag=ECHO_TAG,
        base_image=base_image,
        offline=True,
        constraints=LOCK,
        engine=engine,
        echo=lambda m: None,
    )  # type: ignore[arg-type]
    return result.tag


@pytest.fixture
def managed_names(engine: object) -> Iterator[set[str]]:
    """Names of containers a test starts; any still present afterwards are removed (and fail the test)."""
    names: set[str] = set()
    yield names
    leaked = []
    for c in engine.containers.list(all=True, filters={"label": "openenv.managed=true"}):  # type: ignore[attr-defined]
        if c.name in names:
            leaked.append(c.name)
            c.remove(force=True)
    assert not leaked, f"containers left behind: {leaked}"
