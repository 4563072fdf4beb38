"""The ``docker`` provider passes the same fleet suite as the local one: hardened containers
of the echo image, placement by live load, a killed container failing only its sessions,
a replacement rejoining."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fleet_suite import run_fleet_suite

pytestmark = [pytest.mark.docker, pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def docker_fleet(engine: object, echo_image: str) -> Iterator[object]:
    from openenv.fleet.docker import DockerProvider

    provider = DockerProvider(echo_image, name=f"i16-{uuid.uuid4().hex[:6]}", max_sessions=64, engine=engine)  # type: ignore[arg-type]
    try:
        provider.up(2)
        yield provider
    finally:
        provider.down(grace_s=5.0)
        assert provider.endpoints() == [] and not provider._containers(all_states=True)


async def test_docker_fleet_passes_the_fleet_suite(docker_fleet: object) -> None:
    from openenv.fleet.docker import DockerProvider

    assert isinstance(docker_fleet, DockerProvider)
    await run_fleet_suite(docker_fleet, docker_fleet.kill)
