"""Container start -> first step of an environment image (Docker; not part of ``make bench``).

``flock /tmp/docker.lock python tools/bench/container.py openenv-echo-env:0.1.0``: per repeat,
the time from asking for a hardened container (``EnvClient.from_docker_image``: docker run,
then gRPC health polled until SERVING) to the answer of a first step (reset, then a tool call
as a step) from this process, and the container's memory use once idle; then the image size.
Prints one JSON line (medians).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

import docker

import openenv


async def once(image: str) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    env = openenv.EnvClient.from_docker_image(image, name=f"i19-bench-{uuid.uuid4().hex[:8]}")
    async with env:
        t_ready = time.perf_counter() - t0
        await env.reset()
        await env.step(openenv.CallToolAction("echo_message", {"message": "hello"}))
        t_step = time.perf_counter() - t0
        name = env.container.name  # type: ignore[attr-defined]
        await asyncio.sleep(1.0)
        stats = docker.from_env().containers.get(name).stats(stream=False)
        mem = stats.get("memory_stats", {}).get("usage", 0) / 2**20
    return t_ready, t_step, mem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image")
    ap.add_argument("--repeats", type=int, default=3)
    ns = ap.parse_args()
    runs = [asyncio.run(once(ns.image)) for _ in range(ns.repeats)]
    size = docker.from_env().images.get(ns.image).attrs["Size"] / 1e6
    print(
        json.dumps(
            {
                "image": ns.image,
                "image_mb": round(size),
                "start_to_serving_s": statistics.median(r[0] for r in runs),
                "start_to_first_step_s": statistics.median(r[1] for r in runs),
                "idle_container_mib": statistics.median(r[2] for r in runs),
                "runs_first_step_s": [round(r[1], 2) for r in runs],
            }
        )
    )


if __name__ == "__main__":
    main()
