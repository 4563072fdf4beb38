#!/usr/bin/env python3
"""The scaling rows of ``make bench`` (issue 34), in the shape of OpenEnv's published scaling run
(``tutorial/03-scaling.md``): N concurrent sessions, each connecting, resetting and stepping an
environment whose step awaits a fixed delay (``WaitStep``, 1 s), for N = 1,024 / 4,096 / 16,384,
on one server of 1 and 2 workers (``openenv serve --workers``), over gRPC, the binary WebSocket
(``/v1/session`` on the binary listener) and OpenEnv's JSON ``/ws``.

Per row: success (sessions that connected, reset and answered every step), connect p50/p99 (from
the burst's start to the handshake's answer: every session is opened at once), step p50/p99 (the
1 s delay included), the server's peak RSS (supervisor and workers), and the wall time.

The clients are ``--clients`` processes of their own (sessions split evenly; each starts its
share at the same instant). A gRPC client spreads its sessions over ``--channels`` connections
(grpc's channels to one target otherwise share one TCP connection, which lives in one worker);
each WebSocket session is a connection.

The throughput rows: ``--throughput-sessions`` (256) sessions stepping an environment that does
nothing (``AsyncEcho``) in a closed loop for ``--duration`` s, 1 and 2 workers: steps/s and the
ratio. On 2 shared cores the client processes compete with the server for them.

Writes ``reports/scaling.json`` and ``reports/scaling.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
_PATHS = [
    str(ROOT),
    str(ROOT / "python" / "src"),
    str(ROOT / "envs" / "gridworld" / "src"),
    *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
]
ENV = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": os.pathsep.join(_PATHS)}


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


@contextlib.contextmanager
def server(target: str, workers: int, max_sessions: int, wait_s: float) -> Iterator[tuple[dict[str, str], int]]:
    d = Path(tempfile.mkdtemp(prefix="scaling-"))
    files = {k: d / k for k in ("grpc", "http", "binary")}
    cmd = [
        PY, "-m", "openenv.cli", "serve", target, "--port", "0", "--http-port", "0", "--binary-port", "0",
        "--workers", str(workers), "--max-sessions", str(max_sessions), "--idle-timeout", "0",
        "--max-connections", str(max_sessions + 64), "--max-sessions-per-client", "0", "--grace", "1",
        "--handshake-timeout", "300",
        "--ready-file", str(files["grpc"]), "--http-ready-file", str(files["http"]),
        "--binary-ready-file", str(files["binary"]),
    ]  # fmt: skip
    log = open(d / "stderr", "wb")
    proc = subprocess.Popen(cmd, env={**ENV, "BENCH_WAIT_S": str(wait_s)}, stderr=log, stdout=log)
    try:
        deadline = time.monotonic() + 180
        while not all(f.exists() and f.read_text() for f in files.values()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {(d / 'stderr').read_text()[-2000:]}")
            time.sleep(0.2)
        yield {k: f.read_text() for k, f in files.items()}, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Peak(threading.Thread):
    """The peak summed RSS of a process tree, sampled every 0.5 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self._done = pid, 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.5):
            self.peak = max(self.peak, sum(rss_kib(p) for p in tree(self.pid)))

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


# ---------------------------------------------------------------------------- a client process


async def _barrier(path: str, index: int, parties: int) -> None:
    """Until every client process of the row has its sessions open (files in ``path``)."""
    Path(path, f"ready.{index}").write_text("")
    while len(list(Path(path).glob("ready.*"))) < parties:
        await asyncio.sleep(0.05)


async def _client(
    url: str,
    transport: str,
    n: int,
    steps: int,
    start_at: float,
    channels: int,
    duration: float,
    barrier: tuple[str, int, int] | None = None,
) -> dict[str, Any]:
    import grpc

    import openenv
    from openenv.client.grpc import GrpcConnection

    chans: list[Any] = []
    target = url.removeprefix("grpc://")
    if transport == "grpc":
        opts = [("grpc.use_local_subchannel_pool", 1)]
        chans = [grpc.aio.insecure_channel(target, options=opts) for _ in range(max(1, min(channels, n)))]

    def make(i: int) -> Any:
        if transport == "grpc":
            conn = GrpcConnection(target, url=url, channel=chans[i % len(chans)])
            return openenv.EnvClient(url, connection=conn, connect_timeout=600, resume=False)
        return openenv.EnvClient(url, connect_timeout=600, resume=False)

    connect: list[float] = []
    step_t: list[float] = []
    ok = 0
    counted = [0]
    errors: dict[str, int] = {}

    opened = asyncio.Event()
    window: list[float] = []  # the throughput window's end, once every session of every client is open
    waiting = [n]

    async def one(i: int) -> None:
        nonlocal ok
        c = make(i)
        try:
            await c.connect()
            connect.append(time.time() - start_at)
            await c.reset()
            if duration:  # throughput: a closed loop over one window, once every session is open
                waiting[0] -= 1
                if waiting[0] == 0:
                    if barrier is not None:
                        await _barrier(*barrier)
                    window.append(time.monotonic() + duration)
                    opened.set()
                await opened.wait()
                while time.monotonic() < window[0]:
                    await c.step({"x": i})
                    counted[0] += 1
            else:
                for _ in range(steps):
                    t0 = time.perf_counter()
                    await c.step({"x": i})
                    step_t.append(time.perf_counter() - t0)
            ok += 1
        except Exception as e:  # noqa: BLE001 (counted: the row reports failures by kind)
            key = f"{type(e).__name__}: {str(e)[:200]}"
            errors[key] = errors.get(key, 0) + 1
            if duration and not opened.is_set():
                waiting[0] -= 1
                if waiting[0] == 0:
                    window.append(time.monotonic())
                    opened.set()
        finally:
            with contextlib.suppress(Exception):
                await c.close()

    await asyncio.sleep(max(0.0, start_at - time.time()))
    await asyncio.gather(*(one(i) for i in range(n)))
    for ch in chans:
        await ch.close()
    return {"ok": ok, "connect": connect, "step": step_t, "steps": counted[0], "errors": errors}


def client_main(ns: argparse.Namespace) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    barrier = (ns.barrier, ns.index, ns.parties) if ns.barrier else None
    out = asyncio.run(_client(ns.url, ns.transport, ns.n, ns.steps, ns.start_at, ns.channels, ns.duration, barrier))
    Path(ns.result).write_text(json.dumps(out))


# ---------------------------------------------------------------------------- handshake cost


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its threads."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


async def _handshakes(url: str, n: int, digest: bool, server_pid: int) -> dict[str, float]:
    """CPU per handshake of ``n`` sessions opened at once on one connection, client and server,
    with the description by digest (RFC 0013) or without (the client names none: the server
    sends and the client decodes it every time, as before 1.4)."""
    import grpc

    import openenv
    from openenv.client import grpc as client_grpc
    from openenv.client.grpc import GrpcConnection

    if not digest:
        client_grpc.known_digest = lambda server: ""  # type: ignore[assignment]
    target = url.removeprefix("grpc://")
    async with grpc.aio.insecure_channel(target) as ch:
        warm = openenv.EnvClient(url, connection=GrpcConnection(target, url=url, channel=ch), resume=False)
        await warm.connect()  # the description is known from here on (with digest)
        clients = [
            openenv.EnvClient(
                url, connection=GrpcConnection(target, url=url, channel=ch), connect_timeout=600, resume=False
            )
            for _ in range(n)
        ]
        s0, c0, t0 = cpu_s(server_pid), time.process_time(), time.perf_counter()
        await asyncio.gather(*(c.connect() for c in clients))
        s1, c1, t1 = cpu_s(server_pid), time.process_time(), time.perf_counter()
        await asyncio.gather(*(c.close() for c in clients))
        await warm.close()
    return {"server_us": (s1 - s0) / n * 1e6, "client_us": (c1 - c0) / n * 1e6, "wall_s": t1 - t0}


def handshake_main(ns: argparse.Namespace) -> None:
    out = asyncio.run(_handshakes(ns.url, ns.n, ns.digest == "on", ns.server_pid))
    Path(ns.result).write_text(json.dumps(out))


def handshake_rows(target: str, n: int, rounds: int) -> list[dict[str, Any]]:
    rows = []
    with server(target, 1, n + 16, 0.0) as (urls, pid):
        for rnd in range(rounds):
            for digest in ("off", "on"):
                res = Path(tempfile.mkdtemp(prefix="scaling-hs-")) / "r.json"
                subprocess.run(
                    [PY, __file__, "handshakes", "--url", urls["grpc"], "--n", str(n), "--digest", digest,
                     "--server-pid", str(pid), "--result", str(res)],
                    env=ENV, check=True,
                )  # fmt: skip
                row = {"env": target, "sessions": n, "digest": digest, "round": rnd, **json.loads(res.read_text())}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


# ---------------------------------------------------------------------------- the driver


def q(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


def run_row(
    urls: dict[str, str],
    pid: int,
    transport: str,
    n: int,
    steps: int,
    clients: int,
    channels: int,
    duration: float = 0.0,
) -> dict[str, Any]:
    url = {"grpc": urls["grpc"], "binary": urls["binary"], "ws": urls["http"]}[transport]
    d = Path(tempfile.mkdtemp(prefix="scaling-client-"))
    start_at = time.time() + 8.0 + n / 2000  # every client process imported and waiting
    shares = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    peak = Peak(pid)
    peak.start()
    procs = [
        subprocess.Popen(
            [
                PY,
                __file__,
                "client",
                "--url",
                url,
                "--transport",
                transport,
                "--n",
                str(k),
                "--steps",
                str(steps),
                "--start-at",
                str(start_at),
                "--channels",
                str(channels),
                "--duration",
                str(duration),
                "--barrier",
                str(d),
                "--index",
                str(i),
                "--parties",
                str(sum(1 for k in shares if k)),
                "--result",
                str(d / f"{i}.json"),
            ],
            env=ENV,
        )
        for i, k in enumerate(shares)
        if k
    ]
    for p in procs:
        p.wait()
    wall = time.time() - start_at
    rss = peak.stop()
    res = [json.loads((d / f"{i}.json").read_text()) for i, k in enumerate(shares) if k and (d / f"{i}.json").exists()]
    connect = [x for r in res for x in r["connect"]]
    step = [x for r in res for x in r["step"]]
    errors: dict[str, int] = {}
    for r in res:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    ok = sum(r["ok"] for r in res)
    return {
        "transport": transport,
        "sessions": n,
        "ok": ok,
        "success": ok / n,
        "connect_p50": q(connect, 0.5),
        "connect_p99": q(connect, 0.99),
        "step_p50": q(step, 0.5),
        "step_p99": q(step, 0.99),
        "steps": sum(r["steps"] for r in res),
        "rss_mib": rss / 1024,
        "wall_s": wall,
        "errors": errors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("client")
    c.add_argument("--url")
    c.add_argument("--transport")
    c.add_argument("--n", type=int)
    c.add_argument("--steps", type=int)
    c.add_argument("--start-at", type=float)
    c.add_argument("--channels", type=int)
    c.add_argument("--duration", type=float, default=0.0)
    c.add_argument("--barrier", default="")
    c.add_argument("--index", type=int, default=0)
    c.add_argument("--parties", type=int, default=1)
    c.add_argument("--result")
    h = sub.add_parser("handshakes")
    h.add_argument("--url")
    h.add_argument("--n", type=int)
    h.add_argument("--digest")
    h.add_argument("--server-pid", type=int)
    h.add_argument("--result")
    ap.add_argument("--handshake-sessions", type=int, default=2048)
    ap.add_argument("--skip-handshakes", action="store_true")
    ap.add_argument("--sessions", default="1024,4096,16384")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--transports", default="grpc,binary,ws")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--wait", type=float, default=1.0, help="seconds each step awaits")
    ap.add_argument("--clients", type=int, default=2, help="client processes")
    ap.add_argument("--channels", type=int, default=64, help="gRPC connections per client process")
    ap.add_argument("--throughput-sessions", type=int, default=256)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "reports"))
    ns = ap.parse_args()
    if ns.cmd == "client":
        client_main(ns)
        return 0
    if ns.cmd == "handshakes":
        handshake_main(ns)
        return 0
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    throughput: list[dict[str, Any]] = []
    sizes = [int(x) for x in ns.sessions.split(",") if x]
    workers = [int(x) for x in ns.workers.split(",") if x]
    transports = [t for t in ns.transports.split(",") if t]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    handshakes: list[dict[str, Any]] = []
    if not ns.skip_handshakes:
        for target in ("tools.bench.envs:AsyncEcho", "gridworld.server:GridWorldEnvironment"):
            handshakes += handshake_rows(target, ns.handshake_sessions, 3)
    if not ns.skip_scaling:
        for n in sizes:
            for w in workers:
                per_worker = n  # the kernel's spread is not exact: any worker may take them all
                with server("tools.bench.envs:WaitStep", w, per_worker, ns.wait) as (urls, pid):
                    for t in transports:
                        clients = max(ns.clients, -(-n // 8192))  # a client process holds <= 8,192 sockets
                        row = {"workers": w, **run_row(urls, pid, t, n, ns.steps, clients, ns.channels)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        time.sleep(2.0)
    if not ns.skip_throughput:
        for rnd in range(3):
            for w in workers:
                with server("tools.bench.envs:AsyncEcho", w, 4096, 0.0) as (urls, pid):
                    for t in [t for t in transports if t != "ws"]:
                        row = {
                            "workers": w,
                            "round": rnd,
                            **run_row(urls, pid, t, ns.throughput_sessions, 0, ns.clients, ns.channels, ns.duration),
                        }
                        row["steps_per_s"] = row["steps"] / ns.duration
                        throughput.append(row)
                        print(json.dumps(row), flush=True)
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}",
        "started": started,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
        "wait_s": ns.wait,
        "steps": ns.steps,
        "clients": ns.clients,
        "channels": ns.channels,
    }
    (out / "scaling.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "throughput": throughput, "handshakes": handshakes}, indent=1)
    )
    (out / "scaling.md").write_text(render(meta, rows, throughput, handshakes))
    print(render(meta, rows, throughput, handshakes))
    return 0


def render(
    meta: dict[str, Any], rows: list[dict[str, Any]], throughput: list[dict[str, Any]], handshakes: list[dict[str, Any]]
) -> str:
    lines = [
        f"Scaling ({meta['started']}; {meta['machine']}; load {meta['load_before']:.1f} -> {meta['load_after']:.1f}; "
        f"step awaits {meta['wait_s']:g} s; reset + {meta['steps']} steps per session; "
        f"{meta['clients']}+ client processes)",
        "",
        "| transport | workers | sessions | success | connect p50 | connect p99 | step p50 | step p99 "
        "| server RSS | wall |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['transport']} | {r['workers']} | {r['sessions']:,} | {100 * r['success']:.1f}% | "
            f"{r['connect_p50']:.2f} s | {r['connect_p99']:.2f} s | {r['step_p50']:.2f} s | {r['step_p99']:.2f} s | "
            f"{r['rss_mib']:,.0f} MiB | {r['wall_s']:.0f} s |"
        )
    if throughput:
        lines += [
            "",
            "| transport | workers | sessions | steps/s (median of rounds) | rounds | vs 1 worker |",
            "| --- | ---: | ---: | ---: | --- | ---: |",
        ]
        base: dict[str, float] = {}
        for t in sorted({r["transport"] for r in throughput}):
            for w in sorted({r["workers"] for r in throughput}):
                rs = [r["steps_per_s"] for r in throughput if r["transport"] == t and r["workers"] == w]
                med = sorted(rs)[len(rs) // 2]
                base.setdefault(t, med)
                runs = ", ".join(f"{x:,.0f}" for x in rs)
                n = next(r["sessions"] for r in throughput if r["transport"] == t)
                lines.append(f"| {t} | {w} | {n} | {med:,.0f} | {runs} | {med / base[t]:.2f}x |")
    if handshakes:
        lines += [
            "",
            "| environment | description | server CPU per handshake | client CPU per handshake | runs (server µs) |",
            "| --- | --- | ---: | ---: | --- |",
        ]
        for env in sorted({r["env"] for r in handshakes}):
            for digest in ("off", "on"):
                rs = [r for r in handshakes if r["env"] == env and r["digest"] == digest]
                srv = sorted(r["server_us"] for r in rs)[len(rs) // 2]
                cli = sorted(r["client_us"] for r in rs)[len(rs) // 2]
                how = "by digest (1.4)" if digest == "on" else "sent every time"
                runs = ", ".join(f"{r['server_us']:.0f}" for r in rs)
                lines.append(f"| {env.split(':')[1]} | {how} | {srv:.0f} µs | {cli:.0f} µs | {runs} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
