#!/usr/bin/env python3
"""Binary WebSocket transport vs our gRPC and our JSON ``/ws``: one server, same run (RFC 0011).

``python tools/bench/binary_ws.py [--duration 2] [--repeats 3]``

One ``openenv serve tools.bench.envs:AsyncEcho`` process (gRPC and its HTTP side); the client
runs here, the three transports alternately, each scenario ``--repeats`` times (medians):
sequential async and sync steps (steps/s, p50 round trip), 64 concurrent sessions, and a
batched N=64 vectorised session (gRPC and binary only: ``/ws`` has none). Server CPU per step
is the server process's CPU time (``/proc``) over the steps; client CPU per step this process's.
Prints a Markdown table of the numbers and of same-run ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import openenv  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def seq(url: str, duration: float) -> tuple[int, list[float]]:
    lat: list[float] = []
    async with openenv.EnvClient(url) as env:
        await env.reset()
        end = time.perf_counter() + duration
        while (t := time.perf_counter()) < end:
            await env.step({"x": 1})
            lat.append(time.perf_counter() - t)
    return len(lat), lat


def seq_sync(url: str, duration: float) -> tuple[int, list[float]]:
    lat: list[float] = []
    with openenv.EnvClient(url).sync() as env:
        env.reset()
        end = time.perf_counter() + duration
        while (t := time.perf_counter()) < end:
            env.step({"x": 1})
            lat.append(time.perf_counter() - t)
    return len(lat), lat


async def sessions(url: str, duration: float, n: int = 64) -> tuple[int, list[float]]:
    envs = [openenv.EnvClient(url) for _ in range(n)]
    await asyncio.gather(*(e.connect() for e in envs))
    await asyncio.gather(*(e.reset() for e in envs))
    counts = [0] * n
    end = time.perf_counter() + duration

    async def run(i: int) -> None:
        while time.perf_counter() < end:
            await envs[i].step({"x": 1})
            counts[i] += 1

    await asyncio.gather(*(run(i) for i in range(n)))
    await asyncio.gather(*(e.close() for e in envs))
    return sum(counts), []


async def batched(url: str, duration: float, n: int = 64) -> tuple[int, list[float]]:
    steps = 0
    async with openenv.VectorEnvClient(url, n) as venv:
        await venv.reset_batch()
        end = time.perf_counter() + duration
        while time.perf_counter() < end:
            await venv.step_batch([{"x": 1}] * n)
            steps += n
    return steps, []


def measure(pid: int, fn: Callable[[], tuple[int, list[float]]]) -> dict[str, float]:
    s0, c0, t0 = cpu_of(pid), time.process_time(), time.perf_counter()
    n, lat = fn()
    elapsed = time.perf_counter() - t0
    s1, c1 = cpu_of(pid), time.process_time()
    return {
        "steps_per_s": n / elapsed,
        "p50_us": statistics.median(lat) * 1e6 if lat else float("nan"),
        "server_us": (s1 - s0) / n * 1e6,
        "client_us": (c1 - c0) / n * 1e6,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    with tempfile.TemporaryDirectory() as d:
        ready, http_ready = os.path.join(d, "r"), os.path.join(d, "h")
        proc = subprocess.Popen(
            [sys.executable, "-m", "openenv.cli", "serve", "tools.bench.envs:AsyncEcho", "--port", "0",
             "--http-port", "0", "--idle-timeout", "0", "--ready-file", ready, "--http-ready-file", http_ready],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while not (os.path.exists(ready) and os.path.exists(http_ready)):
                if proc.poll() is not None:
                    raise RuntimeError("the server did not start")
                time.sleep(0.05)
            time.sleep(0.2)
            grpc_url, http_url = Path(ready).read_text().strip(), Path(http_ready).read_text().strip()
            urls = {
                "binary ws": http_url.replace("http://", "ws://") + "/v1/session",
                "gRPC": grpc_url,
                "JSON /ws": http_url,
            }
            dur = args.duration
            scenarios: dict[str, Callable[[str], tuple[int, list[float]]]] = {
                "seq async": lambda u: asyncio.run(seq(u, dur)),
                "seq sync": lambda u: seq_sync(u, dur),
                "64 sessions": lambda u: asyncio.run(sessions(u, dur)),
                "batched N=64": lambda u: asyncio.run(batched(u, dur)),
            }
            results: dict[tuple[str, str], list[dict[str, float]]] = {}
            for _ in range(args.repeats):
                for sc, fn in scenarios.items():
                    for name, url in urls.items():
                        if sc.startswith("batched") and name == "JSON /ws":
                            continue
                        results.setdefault((sc, name), []).append(measure(proc.pid, lambda: fn(url)))  # noqa: B023
        finally:
            proc.terminate()
            proc.wait(15)
    med: dict[tuple[str, str], dict[str, float]] = {
        k: {m: statistics.median(r[m] for r in runs) for m in runs[0]} for k, runs in results.items()
    }
    print("| scenario | transport | steps/s | p50 us | server CPU us/step | client CPU us/step | vs gRPC | vs /ws |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (sc, name), m in med.items():
        g, w = med.get((sc, "gRPC")), med.get((sc, "JSON /ws"))
        vs_g = f"{m['steps_per_s'] / g['steps_per_s']:.2f}x" if g else "-"
        vs_w = f"{m['steps_per_s'] / w['steps_per_s']:.2f}x" if w else "-"
        print(
            f"| {sc} | {name} | {m['steps_per_s']:,.0f} | {m['p50_us']:.0f} | {m['server_us']:.0f} | "
            f"{m['client_us']:.0f} | {vs_g} | {vs_w} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
