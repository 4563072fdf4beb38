#!/usr/bin/env python3
"""The binary WebSocket transport (its own picows listener and on the HTTP listener) vs our gRPC,
our JSON ``/ws`` and stock OpenEnv's JSON WebSocket: same run, same environment (RFC 0011).

``python tools/bench/binary_ws.py [--duration 2] [--repeats 3] [--no-stock]``

One ``openenv serve bridge_envs:AsyncBenchCounter`` process (gRPC, its HTTP side with
``/v1/session`` and ``/ws``, and ``--binary-port``: the picows listener), and stock OpenEnv 0.10
serving the same counter (its cached venv, tools/openenv_upstream.py; skipped when it cannot be
made). The client runs here, the transports alternately, each scenario ``--repeats`` times
(medians): sequential async and sync steps (steps/s, p50 round trip), 64 and 256 concurrent
sessions, and a batched N=64 vectorised session (gRPC and binary only: ``/ws`` has none).
The binary rows run twice more with the ``websockets`` client (the fallback), so the client's
CPU per step is compared on the same server. Server CPU per step is the server process's CPU
time (``/proc``) over the steps; client CPU per step this process's. Prints a Markdown table
of the numbers and of same-run ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import openenv  # noqa: E402
import openenv.client.binary as binary_client  # noqa: E402

ENVS_DIR = ROOT / "python" / "tests" / "bridge"
ACTION = {"delta": 1}

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
            await env.step(ACTION)
            lat.append(time.perf_counter() - t)
    return len(lat), lat


def seq_sync(url: str, duration: float) -> tuple[int, list[float]]:
    lat: list[float] = []
    with openenv.EnvClient(url).sync() as env:
        env.reset()
        end = time.perf_counter() + duration
        while (t := time.perf_counter()) < end:
            env.step(ACTION)
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
            await envs[i].step(ACTION)
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
            await venv.step_batch([ACTION] * n)
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


@contextlib.contextmanager
def websockets_client() -> Iterator[None]:
    """The binary client on websockets (its fallback) instead of picows."""
    saved = binary_client.picows
    binary_client.picows = None  # type: ignore[assignment]
    try:
        yield
    finally:
        binary_client.picows = saved


@contextlib.contextmanager
def stock_server(d: str) -> Iterator[tuple[str, int] | None]:
    """Stock OpenEnv 0.10 serving the async counter, or None when its venv cannot be made."""
    try:
        from tools.bench_bridge import start_upstream
        from tools.openenv_upstream import ensure

        srv = start_upstream("async", Path(d), ensure(), "stock-async", [])
    except Exception as e:  # noqa: BLE001 - no package index, no cached venv: the row is left out
        print(f"(stock OpenEnv left out: {type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        yield None
        return
    try:
        yield srv.url, srv.proc.pid
    finally:
        srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-stock", action="store_true", help="leave stock OpenEnv out")
    args = ap.parse_args()
    env = {
        **os.environ,
        "GRPC_VERBOSITY": "ERROR",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ENVS_DIR), *sys.path]),
    }
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        ready, http_ready, bin_ready = (os.path.join(d, n) for n in ("r", "h", "b"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "openenv.cli", "serve", "bridge_envs:AsyncBenchCounter", "--port", "0",
             "--http-port", "0", "--binary-port", "0", "--idle-timeout", "0", "--max-sessions", "4096",
             "--ready-file", ready, "--http-ready-file", http_ready, "--binary-ready-file", bin_ready],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        stack.callback(proc.wait, 15)
        stack.callback(proc.terminate)
        while not all(os.path.exists(f) for f in (ready, http_ready, bin_ready)):
            if proc.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        time.sleep(0.2)
        grpc_url, http_url = Path(ready).read_text().strip(), Path(http_ready).read_text().strip()
        bin_url = Path(bin_ready).read_text().strip()
        uvicorn_bin = http_url.replace("http://", "ws://") + "/v1/session"
        # (name, url, server pid, binary client on websockets)
        targets: list[tuple[str, str, int, bool]] = [
            ("binary/picows", bin_url, proc.pid, False),
            ("binary/uvicorn", uvicorn_bin, proc.pid, False),
            ("gRPC", grpc_url, proc.pid, False),
            ("our JSON /ws", http_url, proc.pid, False),
            ("binary/picows, websockets client", bin_url, proc.pid, True),
            ("binary/uvicorn, websockets client", uvicorn_bin, proc.pid, True),
        ]
        stock = stack.enter_context(stock_server(d)) if not args.no_stock else None
        if stock is not None:
            targets.append(("stock OpenEnv JSON WS", stock[0], stock[1], False))
        dur = args.duration
        scenarios: dict[str, Callable[[str], tuple[int, list[float]]]] = {
            "seq async": lambda u: asyncio.run(seq(u, dur)),
            "seq sync": lambda u: seq_sync(u, dur),
            "64 sessions": lambda u: asyncio.run(sessions(u, dur, 64)),
            "256 sessions": lambda u: asyncio.run(sessions(u, dur, 256)),
            "batched N=64": lambda u: asyncio.run(batched(u, dur)),
        }
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.repeats):
            for sc, fn in scenarios.items():
                for name, url, pid, on_websockets in targets:
                    if sc.startswith("batched") and "JSON" in name:
                        continue  # OpenEnv's JSON frames have no vectorised session
                    if on_websockets and sc.startswith("256"):
                        continue
                    with websockets_client() if on_websockets else contextlib.nullcontext():
                        results.setdefault((sc, name), []).append(measure(pid, lambda: fn(url)))  # noqa: B023
    med: dict[tuple[str, str], dict[str, float]] = {
        k: {m: statistics.median(r[m] for r in runs) for m in runs[0]} for k, runs in results.items()
    }
    print(
        "| scenario | transport | steps/s | p50 us | server CPU us/step | client CPU us/step "
        "| vs gRPC | vs our /ws | vs stock |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (sc, name), m in med.items():
        cols = []
        for base in ("gRPC", "our JSON /ws", "stock OpenEnv JSON WS"):
            b = med.get((sc, base))
            cols.append(f"{m['steps_per_s'] / b['steps_per_s']:.2f}x" if b else "-")
        print(
            f"| {sc} | {name} | {m['steps_per_s']:,.0f} | {m['p50_us']:.0f} | {m['server_us']:.0f} | "
            f"{m['client_us']:.0f} | {' | '.join(cols)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
