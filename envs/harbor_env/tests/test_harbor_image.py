"""harbor_env inside its image, on a real Docker engine, as start_container runs it (the sandbox's
security options, an unprivileged server): a shipped git task is set up from its Dockerfile
(git comes from the image's staged .debs), solved through the ``shell`` tool and graded 1 by its
tests; an agent inside cannot see the server's files or the tasks.

Needs a Docker engine (skipped with the reason without one, required when CI is set). The image is
the one ``make images`` builds (``openenv-harbor-env:0.1.0``); it is not built here (its build
needs the .debs ``make images`` stages).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

import openenv
from openenv import CallToolAction

pytestmark = pytest.mark.docker

TAG = "openenv-harbor-env:0.1.0"
TIMEOUT = 180.0


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def harbor_container() -> Iterator[Any]:
    try:
        from openenv.deploy.engine import docker_client
        from openenv.deploy.run import start_container
        from openenv.errors import Unavailable

        engine = docker_client()
    except (ImportError, Unavailable) as e:
        if _ci():
            pytest.fail(f"no Docker engine ({e}); CI requires the Docker tests", pytrace=False)
        pytest.skip(f"no Docker engine: {e}")
    import docker.errors

    try:
        engine.images.get(TAG)
    except docker.errors.ImageNotFound:
        if _ci():
            pytest.fail(f"{TAG} is missing: `make images` builds it", pytrace=False)
        pytest.skip(f"{TAG} is not built (make images)")
    container = start_container(TAG, ready_timeout=120)
    try:
        yield container
    finally:
        container.stop()
        engine.close()


def test_a_git_task_is_solved_and_graded_inside_the_image(harbor_container: Any) -> None:
    async def main() -> tuple[Any, Any, Any]:
        async with openenv.ToolEnvClient(harbor_container.url, token=harbor_container.token) as env:
            await env.reset(options={"task_id": "git-revert-commit"})
            peek = await env.step(
                CallToolAction("shell", {"command": "ls /opt/openenv /srv/openenv /tests 2>&1; git log --format=%s"})
            )
            solve = "git revert --no-edit \"$(git log --format=%H --grep='^Enable debug$')\""
            await env.step(CallToolAction("shell", {"command": solve}))
            good = await env.step(CallToolAction("submit", {}))
            await env.reset(options={"task_id": "git-revert-commit"})
            null = await env.step(CallToolAction("submit", {}))
            return peek, good, null

    peek, good, null = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    out = peek.observation.result.structured_content["stdout"]
    assert "Add timeout\nEnable debug\nInitial commit" in out, out
    assert "site-packages" not in out and "bin" not in out.split("Add timeout")[0].split(), out
    assert good.reward == 1.0 and good.terminated, good.observation.result.text
    assert null.reward == 0.0 and null.terminated
