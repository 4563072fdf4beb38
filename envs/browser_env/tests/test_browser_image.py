"""The browser environment inside its image, on a real Docker engine, with start_container's
hardened defaults (read-only root, all capabilities dropped, 1 GiB, 512 pids): Debian's
Chromium in the image serves MiniWoB++ pages and the scripted policy wins tasks by MiniWoB++'s
checker. Needs a Docker engine (skipped with the reason without one, required when CI is set)
and the image ``make images`` builds (``openenv-browser-env:0.1.0``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import openenv

pytestmark = pytest.mark.docker

ENV_DIR = Path(__file__).resolve().parents[1]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI requires the Docker tests)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser_container() -> Iterator[Any]:
    try:
        import docker.errors

        from openenv.deploy.engine import docker_client
        from openenv.deploy.project import EnvProject
        from openenv.deploy.run import start_container
        from openenv.errors import Unavailable

        engine = docker_client()
    except (ImportError, Unavailable) as e:
        _unavailable(f"no Docker engine: {e}")
    tag = EnvProject.load(ENV_DIR).image_tag
    try:
        engine.images.get(tag)
    except docker.errors.ImageNotFound:
        _unavailable(f"{tag} is not built (make images)")
    container = start_container(tag, ready_timeout=120)
    try:
        yield container
    finally:
        container.stop()
        engine.close()


def test_the_scripted_policy_wins_in_the_image(browser_container: Any) -> None:
    from browser_env import policy
    from browser_env.v1.browser_env_pb2 import Observation

    async def main() -> list[tuple[str, float | None, bool]]:
        out = []
        async with openenv.EnvClient(browser_container.url, token=browser_container.token) as env:
            for seed, task in enumerate(("click-test", "enter-text")):
                obs = (await env.reset(seed=seed, task_id=task)).observation
                assert isinstance(obs, Observation) and len(obs.screenshot.data) == 321 * 498 * 3
                s = await env.step(policy.act(obs.task, obs.goal, obs.axtree))
                out.append((task, s.reward, s.terminated))
        return out

    assert asyncio.run(asyncio.wait_for(main(), 240)) == [("click-test", 1.0, True), ("enter-text", 1.0, True)]
