#!/usr/bin/env python3
"""Steps/s of our HTTP side against a stock OpenEnv server, on OpenEnv's own protocol.

Both servers run the same trivial counter environment, each written against its own
framework's API (``python/tests/bridge/bridge_envs.py:BenchCounter`` for ours,
``python/tests/bridge/upstream_envs.py:CounterEnvironment`` for OpenEnv, served by
OpenEnv's stack from its own venv, see ``tools/openenv_upstream.py``). Each runs in its own
process on 127.0.0.1; one client (this process, ``websockets`` on uvloop) drives both
with identical OpenEnv frames: connect N sessions, reset each, then ``--steps`` steps per
session, N sessions concurrently; only the step phase is timed. Runs alternate between
the servers and the median of ``--rounds`` is reported, with the server's CPU time per
step (from /proc).

    python tools/bench_bridge.py                       # 1 and 64 sessions, every env kind
    python tools/bench_bridge.py --env async --rounds 5
    python tools/bench_bridge.py --json out.json

Client compression: ``stock`` offers permessage-deflate as OpenEnv's client does (each
server decides; ours declines by default); ``none`` disables it on the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ENVS_DIR = ROOT / "python" / "tests" / "bridge"

from tools.openenv_upstream import DEFAULT, ensure  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its finished children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {err}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not ready after {timeout:g} s")
        time.sleep(0.05)
    return path.read_text().strip()


class Served:
    """A server subprocess and its URL."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], ready: Path) -> None:
        self.name = name
        self.proc = subprocess.Popen(cmd, env=env, cwd=str(ENVS_DIR), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = wait_file(ready, self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_ours(env_kind: str, tmp: Path) -> Served:
    ready = tmp / f"ours-{env_kind}.url"
    cls = {"sync": "BenchCounter", "inline": "InlineBenchCounter", "async": "AsyncBenchCounter"}[env_kind]
    env = {**os.environ, "PYTHONPATH": str(ENVS_DIR)}
    cmd = [
        sys.executable,
        "-m",
        "openenv.cli",
        "serve",
        f"bridge_envs:{cls}",
        "--port",
        "0",
        "--http-port",
        "0",
        "--http-ready-file",
        str(ready),
        "--max-sessions",
        "1024",
    ]
    return Served("openenv (ours)", cmd, env, ready)


def start_upstream(env_kind: str, tmp: Path, python: Path, label: str, extra: list[str]) -> Served:
    ready = tmp / f"upstream-{env_kind}-{abs(hash(label))}.url"
    app = "upstream_envs:async_counter_app" if env_kind == "async" else "upstream_envs:counter_app"
    env = {**os.environ, "MAX_CONCURRENT_ENVS": "1024", "PYTHONPATH": str(ENVS_DIR)}
    env.pop("ENABLE_WEB_INTERFACE", None)
    cmd = [str(python), str(ENVS_DIR / "upstream_serve.py"), app, str(ready), *extra]
    return Served(label, cmd, env, ready)


async def drive(url: str, sessions: int, steps: int, compression: str, warmup: int = 50) -> tuple[float, int]:
    """Open ``sessions`` WebSockets, reset, warm up, then time ``steps`` steps on each."""
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"
    kw: dict[str, Any] = {"max_size": 100 * 1024 * 1024, "open_timeout": 30}
    if compression == "none":
        kw["compression"] = None
    conns = [await connect(ws_url, **kw) for _ in range(sessions)]
    step = json.dumps({"type": "step", "data": {"delta": 1}})
    try:
        for ws in conns:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            r = json.loads(await ws.recv())
            assert r["type"] == "observation", r

        async def run(ws: Any, n: int) -> None:
            for _ in range(n):
                await ws.send(step)
                r = await ws.recv()
                if r[9] != "o":  # '{"type":"observation"...'
                    raise RuntimeError(f"unexpected reply {r[:200]}")

        await asyncio.gather(*(run(ws, warmup) for ws in conns))
        t0 = time.perf_counter()
        await asyncio.gather(*(run(ws, steps) for ws in conns))
        elapsed = time.perf_counter() - t0
    finally:
        for ws in conns:
            await ws.close()
    return elapsed, sessions * steps


def measure(server: Served, sessions: int, steps: int, compression: str) -> dict[str, float]:
    c0 = cpu_seconds(server.proc.pid)
    elapsed, total = run_loop(drive(server.url, sessions, steps, compression))
    c1 = cpu_seconds(server.proc.pid)
    return {"steps_per_s": total / elapsed, "server_cpu_us_per_step": (c1 - c0) / total * 1e6}


def run_loop(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,64", help="comma-separated session counts")
    ap.add_argument("--steps", type=int, default=0, help="steps per session (default: 6000 / sessions, >= 100)")
    ap.add_argument("--total-steps", type=int, default=6000, help="steps per run when --steps is 0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--env",
        choices=["sync", "inline", "async", "all"],
        default="all",
        help="sync: sync methods in worker threads on both sides; inline: ours runs the sync "
        "methods on the loop (run_in_thread = False), OpenEnv's in threads; async: async "
        "methods on both sides",
    )
    ap.add_argument("--compression", choices=["stock", "none"], default="stock")
    ap.add_argument("--upstream", default=f"{DEFAULT[0]}=={DEFAULT[1]}", help="DIST==VERSION of OpenEnv")
    ap.add_argument(
        "--upstream-fast",
        action="store_true",
        help="also run OpenEnv with uvloop + httptools installed (its venv variant)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ns = ap.parse_args(argv)
    dist, version = ns.upstream.split("==")
    python = ensure(dist, version, quiet=False)
    variants: list[tuple[str, Path, list[str]]] = [(f"OpenEnv {version} (stock)", python, [])]
    if ns.upstream_fast:
        fast = ensure(dist, version, extras=("uvloop", "httptools"), quiet=False)
        variants.append((f"OpenEnv {version} + uvloop/httptools", fast, ["--loop", "uvloop", "--http", "httptools"]))
    counts = [int(x) for x in ns.sessions.split(",")]
    envs = ["sync", "inline", "async"] if ns.env == "all" else [ns.env]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for env_kind in envs:
            servers = [start_ours(env_kind, tmp)]
            try:
                for label, py, extra in variants:
                    servers.append(start_upstream(env_kind, tmp, py, label, extra))
                for n in counts:
                    steps = ns.steps or max(100, ns.total_steps // n)
                    samples: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
                    for r in range(ns.rounds):
                        order = servers if r % 2 == 0 else list(reversed(servers))
                        for s in order:
                            samples[s.name].append(measure(s, n, steps, ns.compression))
                    ours = statistics.median(x["steps_per_s"] for x in samples[servers[0].name])
                    for s in servers:
                        sps = [x["steps_per_s"] for x in samples[s.name]]
                        cpu = [x["server_cpu_us_per_step"] for x in samples[s.name]]
                        med = statistics.median(sps)
                        row = {
                            "env": env_kind,
                            "sessions": n,
                            "steps_per_session": steps,
                            "server": s.name,
                            "steps_per_s_median": round(med),
                            "steps_per_s_runs": [round(x) for x in sps],
                            "server_cpu_us_per_step_median": round(statistics.median(cpu)),
                            "ours_over_this": round(ours / med, 2),
                        }
                        results.append(row)
                        print(
                            f"{env_kind:5} sessions={n:<3} {s.name:38} {med:8.0f} steps/s "
                            f"(runs {', '.join(str(round(x)) for x in sps)}), server CPU "
                            f"{statistics.median(cpu):5.0f} us/step, ours/this {ours / med:.2f}x",
                            flush=True,
                        )
            finally:
                for s in servers:
                    s.stop()
    meta = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "compression": ns.compression,
        "rounds": ns.rounds,
        "load_average_at_end": os.getloadavg(),
    }
    print(json.dumps(meta))
    if ns.json:
        ns.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
