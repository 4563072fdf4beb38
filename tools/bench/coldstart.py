"""Cold start and density, ours against stock OpenEnv (part of ``make bench``).

Per system, alternating, ``--repeats`` times: the time from spawning the server process to
(a) its ready signal and (b) the answer of a first ``step`` from an already running client
(reset, then step, over the system's own protocol), then the server's idle RSS after that
session closed. Then, once per system, the RSS that ``--sessions`` idle sessions add (each
opened and reset, OpenEnv's over its WebSocket, ours over gRPC), per session. Systems:

* ``ours (gRPC, grpcio)``: ``openenv serve bridge_envs:BenchCounter --no-http``;
* ``ours (gRPC, grpclib)``: the same with ``--engine grpclib``;
* ``ours (gRPC + HTTP side)``: ``openenv serve`` with its HTTP side, first step over ``/ws``;
* ``stock OpenEnv 0.10.0``: its ``create_app`` on its uvicorn (tools/openenv_upstream.py's venv),
  the same counter written against its API (python/tests/bridge/upstream_envs.py).

Prints one JSON object (medians) on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BRIDGE_ENVS = ROOT / "python" / "tests" / "bridge"
sys.path[:0] = [str(ROOT), str(BRIDGE_ENVS)]
ENV = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": f"{ROOT}{os.pathsep}{BRIDGE_ENVS}"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        time.sleep(0.002)
    return path.read_text().strip()


def spawn(system: str, tmp: Path) -> tuple[subprocess.Popen[bytes], Path, str]:
    """Start ``system``; return the process, its ready file and the protocol of its first step."""
    ready = tmp / f"{abs(hash((system, time.time())))}.url"
    if system == "openenv":
        from tools.openenv_upstream import ensure

        env = {**os.environ, "MAX_CONCURRENT_ENVS": "2048", "PYTHONPATH": str(BRIDGE_ENVS)}
        env.pop("ENABLE_WEB_INTERFACE", None)
        cmd = [str(ensure()), str(BRIDGE_ENVS / "upstream_serve.py"), "upstream_envs:counter_app", str(ready)]
        return (
            subprocess.Popen(cmd, env=env, cwd=str(BRIDGE_ENVS), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
            ready,
            "ws",
        )
    cmd = [
        sys.executable,
        "-m",
        "openenv.cli",
        "serve",
        "bridge_envs:BenchCounter",
        "--port",
        "0",
        "--idle-timeout",
        "0",
    ]
    if system == "ours-http":
        cmd += ["--http-port", "0", "--http-ready-file", str(ready)]
        proto = "ws"
    else:
        cmd += ["--no-http", "--ready-file", str(ready)]
        proto = "grpc"
    if system == "ours-grpclib":
        cmd += ["--engine", "grpclib"]
    return (
        subprocess.Popen(cmd, env=ENV, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
        ready,
        proto,
    )


async def first_step(url: str, proto: str, engine: str) -> None:
    if proto == "grpc":
        import openenv

        async with openenv.EnvClient(url, grpc_engine=engine) as c:
            await c.reset()
            await c.step({"delta": 1})
        return
    from websockets.asyncio.client import connect

    async with connect(url.replace("http://", "ws://").rstrip("/") + "/ws", open_timeout=60) as ws:
        for frame in ({"type": "reset", "data": {}}, {"type": "step", "data": {"delta": 1}}):
            await ws.send(json.dumps(frame))
            reply = json.loads(await ws.recv())
            if reply.get("type") != "observation":
                raise RuntimeError(f"unexpected reply {reply}")


async def hold_sessions(url: str, proto: str, n: int, measure: Any) -> float:
    """Open and reset ``n`` sessions, call ``measure()`` while they are idle, close them."""
    if proto == "grpc":
        import openenv

        clients = [openenv.EnvClient(url, connect_timeout=120) for _ in range(n)]
        for i in range(0, n, 64):
            await asyncio.gather(*(c.connect() for c in clients[i : i + 64]))
            await asyncio.gather(*(c.reset() for c in clients[i : i + 64]))
        try:
            await asyncio.sleep(0.5)
            return float(measure())
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    from websockets.asyncio.client import connect

    conns = []
    try:
        for _ in range(n):
            ws = await connect(url.replace("http://", "ws://").rstrip("/") + "/ws", open_timeout=120, compression=None)
            conns.append(ws)
            await ws.send(json.dumps({"type": "reset", "data": {}}))
            await ws.recv()
        await asyncio.sleep(0.5)
        return float(measure())
    finally:
        await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)


SYSTEMS = {
    "ours-grpcio": "ours (gRPC, grpcio engine)",
    "ours-grpclib": "ours (gRPC, grpclib engine)",
    "ours-http": "ours (gRPC + HTTP side; first step over /ws)",
    "openenv": "stock OpenEnv 0.10.0 (uvicorn; first step over /ws)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sessions", type=int, default=1000, help="idle sessions for the density figure")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ns = ap.parse_args()
    systems = ns.systems.split(",")
    # The client side's imports happen before anything is timed (they are the driver's, not the server's).
    from websockets.asyncio.client import connect  # noqa: F401

    import openenv
    import openenv.client.grpclib  # noqa: F401

    runs: dict[str, list[tuple[float, float, float]]] = {s: [] for s in systems}
    density: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "openenv" in systems:
            from tools.openenv_upstream import ensure

            ensure()  # the cached venv exists before anything is timed
        for _ in range(ns.repeats):
            for system in systems:
                t0 = time.perf_counter()
                proc, ready, proto = spawn(system, tmp)
                try:
                    url = wait_file(ready, proc)
                    t_ready = time.perf_counter() - t0
                    asyncio.run(first_step(url, proto, "grpclib" if system == "ours-grpclib" else "grpcio"))
                    t_step = time.perf_counter() - t0
                    time.sleep(0.5)  # the session's close settles
                    runs[system].append((t_ready, t_step, rss_mib(proc.pid)))
                finally:
                    proc.terminate()
                    proc.wait(30)
        for system in systems:
            if ns.sessions <= 0:
                break
            proc, ready, proto = spawn(system, tmp)
            try:
                url = wait_file(ready, proc)
                asyncio.run(first_step(url, proto, "grpcio"))
                time.sleep(0.5)
                before = rss_mib(proc.pid)
                after = asyncio.run(hold_sessions(url, proto, ns.sessions, lambda p=proc.pid: rss_mib(p)))
                density[system] = {"idle_rss_mib": before, "per_session_kib": (after - before) * 1024 / ns.sessions}
            finally:
                proc.terminate()
                proc.wait(30)
    out = {
        s: {
            "label": SYSTEMS[s],
            "start_to_ready_s": statistics.median(r[0] for r in runs[s]),
            "start_to_first_step_s": statistics.median(r[1] for r in runs[s]),
            "idle_rss_mib": statistics.median(r[2] for r in runs[s]),
            "runs_first_step_s": [round(r[1], 3) for r in runs[s]],
            **({"sessions": ns.sessions, **density[s]} if s in density else {}),
        }
        for s in systems
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
