"""Chess inside its image, on a real Docker engine: Debian's Stockfish is in the image and
plays a full game to the end. Needs a Docker engine (skipped with the reason without one,
required when CI is set) and the image ``make images`` builds (``openenv-chess-env:0.1.0``)."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import openenv
from openenv import CallToolAction

pytestmark = pytest.mark.docker

ENV_DIR = Path(__file__).resolve().parents[1]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI requires the Docker tests)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chess_container() -> Iterator[Any]:
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


def test_stockfish_plays_a_full_game_in_the_image(chess_container: Any) -> None:
    async def main() -> Any:
        rng = random.Random(3)
        async with openenv.ToolEnvClient(chess_container.url, token=chess_container.token) as env:
            r = await env.reset(options={"color": "black", "skill": 20, "movetime_ms": 20})
            while not r.terminated:
                legal = (await env.step(CallToolAction("legal_moves", {}))).observation.result.data
                r = await env.step(CallToolAction("move", {"move": rng.choice(legal)}))
            return r, await env.state()

    last, state = asyncio.run(asyncio.wait_for(main(), 300))
    assert last.reward == -1.0 and state.state["result"] == "1-0"
