#!/usr/bin/env python3
"""Fleet rows of ``make bench`` (issue 16): local servers on this machine, one client process.

* scaling: steps/s of ``--sessions`` concurrent sessions spread over 1, 2 and 4 servers, and the
  scaling efficiency ``steps/s(n) / (n x steps/s(1))`` (on 2 shared cores the client and the
  servers compete for the same cores: read it as what one trainer process gets);
* connect time p50/p99 while opening ``--burst`` sessions at once across 4 servers, placed by
  live load (each session's time from the burst's start to its handshake answer);
* recovery: a server SIGKILLed; time until its replacement serves and the fleet client opens a
  session on it;
* memory per idle session across the fleet (servers' RSS before and after the burst), and the
  cold start of one server (process start to gRPC SERVING).

Writes ``reports/fleet.json`` and ``reports/fleet.md``; ``tools/bench/run.py`` appends the latter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TARGET = "echo_env:EchoEnvironment"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _pids(provider: Any) -> list[int]:
    return [int(ep.where.split()[-1]) for ep in provider.endpoints()]


async def _steps_per_s(provider: Any, sessions: int, duration: float) -> float:
    import openenv
    from openenv.fleet import FleetClient

    action = openenv.CallToolAction("echo_message", {"message": "hi"})
    async with FleetClient(provider, client_cls=openenv.ToolEnvClient, refresh_s=5.0) as fleet:
        envs = await fleet.open_many(sessions)
        await asyncio.gather(*(e.reset() for e in envs))
        count = 0
        stop = time.monotonic() + duration

        async def loop(env: Any) -> None:
            nonlocal count
            while time.monotonic() < stop:
                await env.step(action)
                count += 1

        await asyncio.gather(*(loop(e) for e in envs[: min(4, len(envs))]))  # warm-up pass
        count, stop = 0, time.monotonic() + duration
        start = time.monotonic()
        await asyncio.gather(*(loop(e) for e in envs))
        return count / (time.monotonic() - start)


async def _burst(provider: Any, n: int) -> dict[str, Any]:
    import openenv
    from openenv.fleet import FleetClient

    async with FleetClient(provider, client_cls=openenv.ToolEnvClient, refresh_s=5.0) as fleet:
        times: list[float] = []
        start = time.monotonic()

        async def one() -> None:
            await fleet.open()
            times.append(time.monotonic() - start)

        await asyncio.gather(*(one() for _ in range(n)))
        wall = time.monotonic() - start
        rss_after = sum(rss_kib(p) for p in _pids(provider))
        times.sort()
        return {
            "sessions": n,
            "p50_s": statistics.median(times),
            "p99_s": times[min(len(times) - 1, int(0.99 * len(times)))],
            "wall_s": wall,
            "rss_after_kib": rss_after,
        }


async def _recovery(provider: Any) -> float:
    import openenv
    from openenv.fleet import FleetClient

    async with FleetClient(provider, client_cls=openenv.ToolEnvClient, refresh_s=0.2) as fleet:
        await fleet.open_many(8)
        victim = provider.endpoints()[0]
        start = time.monotonic()
        provider.kill(victim.name)
        healed = await asyncio.to_thread(provider.heal)
        new = {ep.url for ep in healed} - {s.fleet_server.url for s in fleet.sessions}
        while True:
            env = await fleet.open()
            if env.fleet_server.url in new:  # type: ignore[attr-defined]
                return time.monotonic() - start
            await asyncio.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=64, help="concurrent sessions of the scaling rows")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3, help="rounds of the scaling rows (medians)")
    ap.add_argument("--burst", type=int, default=4096, help="sessions opened at once")
    ap.add_argument("--out", default=str(ROOT / "reports"))
    ap.add_argument("--quick", action="store_true", help="short runs, a 512-session burst (smoke test)")
    ns = ap.parse_args()
    if ns.quick:
        ns.duration, ns.burst, ns.sessions, ns.repeats = 1.0, 512, 16, 1
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from openenv.fleet import LocalProvider

    results: dict[str, Any] = {"scaling": []}
    runs: dict[int, list[float]] = {1: [], 2: [], 4: []}
    cold: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        # The scaling rows, alternating 1, 2, 4 servers per round (medians); cold starts of 1.
        for _ in range(ns.repeats):
            for n in runs:
                p = LocalProvider(
                    TARGET, max_sessions=max(ns.sessions, 64), state_dir=d, serve_args=["--idle-timeout", "0"]
                )
                t0 = time.monotonic()
                p.up(n)
                if n == 1:
                    cold.append(time.monotonic() - t0)
                try:
                    runs[n].append(asyncio.run(_steps_per_s(p, ns.sessions, ns.duration)))
                finally:
                    p.down(grace_s=5.0)
        results["cold_start_s"] = statistics.median(cold)
        base = statistics.median(runs[1])
        for n, vals in runs.items():
            sps = statistics.median(vals)
            results["scaling"].append(
                {
                    "servers": n,
                    "sessions": ns.sessions,
                    "steps_per_s": sps,
                    "runs": vals,
                    "vs_one_server": sps / base,
                    "efficiency": sps / (n * base),
                }
            )

        # The burst (connect times, memory per idle session) on 4 servers.
        p = LocalProvider(TARGET, max_sessions=ns.burst // 4 + 64, state_dir=d, serve_args=["--idle-timeout", "0"])
        p.up(4)
        try:
            rss_before = sum(rss_kib(pid) for pid in _pids(p))
            burst = asyncio.run(_burst(p, ns.burst))
            burst["per_idle_session_kib"] = (burst.pop("rss_after_kib") - rss_before) / ns.burst
            burst["idle_servers_rss_mib"] = rss_before / 1024
            results["burst"] = burst
            results["recovery_s"] = asyncio.run(_recovery(p))
        finally:
            p.down(grace_s=5.0)

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(results, indent=2))
    b = results["burst"]
    lines = [
        "### Fleet (local provider, one client process)",
        "",
        "| servers | sessions | steps/s (median) | vs 1 server | scaling efficiency | runs |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
        *(
            f"| {r['servers']} | {r['sessions']} | {r['steps_per_s']:,.0f} | {r['vs_one_server']:.2f}x | "
            f"{100 * r['efficiency']:.0f}% | {', '.join(f'{x:,.0f}' for x in r['runs'])} |"
            for r in results["scaling"]
        ),
        "",
        f"Opening {b['sessions']:,} sessions at once over 4 servers: connect time p50 {b['p50_s']:.2f} s, "
        f"p99 {b['p99_s']:.2f} s (all open after {b['wall_s']:.2f} s; OpenEnv's L7-balanced run: p50 17.5 s, "
        "p99 29.8 s for 16,384 sessions on 2 nodes, a different machine).",
        f"Memory per idle session across the fleet: {b['per_idle_session_kib']:.1f} KiB "
        f"(4 idle servers: {b['idle_servers_rss_mib']:.0f} MiB in all). "
        f"Cold start of one server: {results['cold_start_s']:.2f} s. "
        f"Recovery after a server is SIGKILLed (replacement serving, a new session placed on it): "
        f"{results['recovery_s']:.2f} s.",
    ]
    (out / "fleet.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
