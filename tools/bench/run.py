#!/usr/bin/env python3
"""``make bench``: side-by-side transport benchmarks, reported as ratios.

Every measurement is a separate client process against a server process, both on this
machine; systems are run alternately, ``--repeats`` times (default 5), and medians are
reported, with ratios against the raw grpc.aio ceiling measured in the same run.
Results go to ``reports/bench.json`` and ``reports/bench.md``.

The gridworld rows compare the same environment and typed client declared with the ``_pb2``
classes (upb, the default) and with the betterproto2 dataclasses (the betterproto facade,
docs/betterproto.md); the codec micro rows (``tools/bench/codecs.py``) time one encode +
decode per message through the runtime's codec, without I/O. The self-play rows
(``tools/bench/selfplay.py``, ``--only self-play``) are not timed: a tabular agent trained by
self-play over a multi-agent session plays a random opponent, and its win rate is reported
beside a random agent's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
CLIENT = str(ROOT / "tools" / "bench" / "client.py")
CODECS = str(ROOT / "tools" / "bench" / "codecs.py")
HANDOFF = str(ROOT / "tools" / "bench" / "handoff.py")
COLDSTART = str(ROOT / "tools" / "bench" / "coldstart.py")
SANDBOX = str(ROOT / "tools" / "bench" / "sandbox.py")
SELFPLAY = str(ROOT / "tools" / "bench" / "selfplay.py")
BUDGET = str(ROOT / "tools" / "bench" / "budget.py")
MICRO_LABEL = "codec encode+decode per message, gridworld pb2 vs betterproto2"
GRIDWORLD_PB2 = "gridworld, pb2 types (upb), sequential"
GRIDWORLD_BP = "gridworld, betterproto2 types, sequential"
H2 = "ours on grpclib (client and server)"  # rows of the grpclib engine; their client runs it too
BRIDGE_ENVS = ROOT / "python" / "tests" / "bridge"
# The caller's PYTHONPATH stays after ours: a worktree (or an exported older tree) put first
# there is what the servers run, so two trees can be benched under the same conditions.
_PATHS = [str(ROOT), str(BRIDGE_ENVS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
ENV = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": os.pathsep.join(_PATHS)}
sys.path.insert(0, str(ROOT))


def _serve_cmd(target: str) -> list[str]:
    cmd = [PY, "-m", "openenv.cli", "serve", target, "--port", "0", "--idle-timeout", "0"]
    help_text = subprocess.run([*cmd[:4], "--help"], capture_output=True, text=True, env=ENV).stdout
    if "--no-http" in help_text:
        cmd.append("--no-http")
    return cmd


@contextlib.contextmanager
def server(cmd: list[str], timeout: float = 60.0) -> Iterator[tuple[str, int]]:
    """Start a server process that writes its URL to --ready-file; yield (url, pid)."""
    with tempfile.TemporaryDirectory() as d:
        ready = os.path.join(d, "ready")
        proc = subprocess.Popen(
            [*cmd, "--ready-file", ready], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + timeout
            while not os.path.exists(ready):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server {cmd} did not start: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.05)
            yield Path(ready).read_text().strip(), proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def upstream(app: str) -> Iterator[tuple[str, int]]:
    """A stock OpenEnv server (its own cached venv, its own uvicorn stack) serving ``app``."""
    from tools.bench_bridge import start_upstream
    from tools.openenv_upstream import ensure

    python = ensure()
    kind = "async" if app.startswith("async") else "sync"
    with tempfile.TemporaryDirectory() as d:
        srv = start_upstream(kind, Path(d), python, f"stock-{app}", []) if app != "echo_app" else None
        if srv is None:  # the MCP echo env
            from tools.bench_bridge import Served

            ready = Path(d) / "echo.url"
            env = {**os.environ, "MAX_CONCURRENT_ENVS": "4096", "PYTHONPATH": str(BRIDGE_ENVS)}
            env.pop("ENABLE_WEB_INTERFACE", None)
            srv = Served(
                "stock-echo",
                [str(python), str(BRIDGE_ENVS / "upstream_serve.py"), "upstream_envs:echo_app", str(ready)],
                env,
                ready,
            )
        try:
            yield srv.url, srv.proc.pid
        finally:
            srv.stop()


@contextlib.contextmanager
def http_server(cmd: list[str]) -> Iterator[tuple[str, int]]:
    """Our server, measured on its HTTP side (OpenEnv's protocol)."""
    with tempfile.TemporaryDirectory() as d:
        ready = os.path.join(d, "http")
        with server([*cmd, "--http-ready-file", ready]) as (_grpc_url, pid):
            deadline = time.monotonic() + 30
            while not os.path.exists(ready) and time.monotonic() < deadline:
                time.sleep(0.05)
            yield Path(ready).read_text().strip(), pid


def client(
    kind: str, scenario: str, url: str, duration: float, k: int | None = None, engine: str = "grpcio"
) -> dict[str, Any]:
    cmd = [PY, CLIENT, "--kind", kind, "--scenario", scenario, "--url", url, "--duration", str(duration)]
    if k is not None:
        cmd += ["--k", str(k)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, "OPENENV_ENGINE": engine}, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in runs if key in r and r.get("error") is None]
    return statistics.median(vals) if vals else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="1 repeat, short runs, small C (smoke test)")
    ap.add_argument("--out", default=str(ROOT / "reports"))
    ap.add_argument(
        "--only",
        default="",
        help="run only scenarios whose label contains this text (several: separated by '|')",
    )
    ap.add_argument(
        "--compare",
        metavar="BASELINE.json",
        default=None,
        help="compare with an earlier reports/bench.json: rows whose ratio to the ceiling fell by more than "
        "--tolerance are flagged as regressions (exit status 1)",
    )
    ap.add_argument("--tolerance", type=float, default=0.10, help="regression threshold for --compare (0.10: 10%%)")
    ns = ap.parse_args()
    if ns.quick:
        ns.repeats, ns.duration = 1, 0.5
    conc = [1, 16, 64] if ns.quick else [1, 16, 64, 256, 1024]
    idle_n = 100 if ns.quick else 1000

    http = [PY, "-m", "openenv.cli", "serve", "--port", "0", "--http-port", "0", "--idle-timeout", "0"]
    servers: dict[str, Any] = {
        "raw": [PY, str(ROOT / "tools" / "bench" / "raw.py"), "--port", "0"],
        "sync": _serve_cmd("bridge_envs:BenchCounter"),
        "async": _serve_cmd("bridge_envs:AsyncBenchCounter"),
        "bridge-sync": [*http[:4], "bridge_envs:BenchCounter", *http[4:], "--http-ready-file"],
        "bridge-async": [*http[:4], "bridge_envs:AsyncBenchCounter", *http[4:], "--http-ready-file"],
        "openenv-sync": "counter_app",
        "openenv-async": "async_counter_app",
        "openenv-tools": "echo_app",
        "bridge-tools": [*http[:4], "tools.bench.envs:ToolEcho", *http[4:], "--http-ready-file"],
        # The grpclib engine (openenv.grpc_libraries), the same servers: `--engine grpclib`.
        "sync-grpclib": [*_serve_cmd("bridge_envs:BenchCounter"), "--engine", "grpclib"],
        # Sync hooks always on the worker threads (inline execution off, openenv.runtime.inline).
        "sync-threads": [*_serve_cmd("bridge_envs:BenchCounter"), "--inline-threshold-us", "0"],
        "bridge-sync-threads": [
            *http[:4],
            "bridge_envs:BenchCounter",
            *http[4:],
            "--inline-threshold-us",
            "0",
            "--http-ready-file",
        ],
        "async-grpclib": [*_serve_cmd("bridge_envs:AsyncBenchCounter"), "--engine", "grpclib"],
        "tools": _serve_cmd("tools.bench.envs:ToolEcho"),
        "big": _serve_cmd("tools.bench.envs:BigObs"),
        "image": _serve_cmd("tools.bench.envs:Image"),
        "gridworld-pb2": _serve_cmd("gridworld.server:GridWorldEnvironment"),
        "gridworld-bp": _serve_cmd("gridworld.facade:GridWorldBetterproto"),
    }
    # (row label, server, client kind, scenario, k)
    plan: list[tuple[str, str, str, str, int | None]] = [
        ("raw grpc.aio bidi echo (ceiling)", "raw", "raw", "seq", None),
        ("ours, sync env, sequential", "sync", "ours", "seq", None),
        ("ours, async env, sequential", "async", "ours", "seq", None),
        ("ours, sync env (threads only), sequential", "sync-threads", "ours", "seq", None),
        ("ours, sync env, pipelined k=16", "sync", "ours", "pipelined", 16),
        ("ours, async env, pipelined k=16", "async", "ours", "pipelined", 16),
        ("ours, sync env, batched N=64", "sync", "ours", "batched", 64),
        ("ours, async env, batched N=64", "async", "ours", "batched", 64),
        ("ours, async env, batched N=256", "async", "ours", "batched", 256),
        ("ours, async env, batched N=1024", "async", "ours", "batched", 1024),
        (f"{H2}, sync env, sequential", "sync-grpclib", "ours", "seq", None),
        (f"{H2}, async env, sequential", "async-grpclib", "ours", "seq", None),
        (f"{H2}, sync env, pipelined k=16", "sync-grpclib", "ours", "pipelined", 16),
        (f"{H2}, async env, pipelined k=16", "async-grpclib", "ours", "pipelined", 16),
        (f"{H2}, async env, batched N=64", "async-grpclib", "ours", "batched", 64),
        (f"{H2}, async env, batched N=1024", "async-grpclib", "ours", "batched", 1024),
        ("grpcio client, grpclib server, async env, sequential", "async-grpclib", "ours", "seq", None),
        ("ours, tool call as a step", "tools", "ours", "tools", None),
        ("stock OpenEnv, MCP tool call as a step (WebSocket)", "openenv-tools", "ws", "tools", None),
        ("ours bridge, tool call as a step (WebSocket)", "bridge-tools", "ws", "tools", None),
        ("stock OpenEnv, sync env, sequential (WebSocket)", "openenv-sync", "ws", "seq", None),
        ("stock OpenEnv, async env, sequential (WebSocket)", "openenv-async", "ws", "seq", None),
        ("ours bridge, sync env, sequential (WebSocket)", "bridge-sync", "ws", "seq", None),
        ("ours bridge, async env, sequential (WebSocket)", "bridge-async", "ws", "seq", None),
        ("ours bridge, sync env (threads only), sequential (WebSocket)", "bridge-sync-threads", "ws", "seq", None),
        ("stock OpenEnv, sync env, 64 sessions (WebSocket)", "openenv-sync", "ws", "concurrent", 64),
        ("stock OpenEnv, async env, 64 sessions (WebSocket)", "openenv-async", "ws", "concurrent", 64),
        ("ours bridge, sync env, 64 sessions (WebSocket)", "bridge-sync", "ws", "concurrent", 64),
        ("ours bridge, async env, 64 sessions (WebSocket)", "bridge-async", "ws", "concurrent", 64),
        ("ours, reset", "async", "ours", "reset", None),
        ("ours, 64 KiB JSON observation", "big", "ours", "seq", None),
        ("ours, 1 MiB uint8 tensor observation", "image", "ours", "seq", None),
        (GRIDWORLD_PB2, "gridworld-pb2", "gridworld", "pb2", None),
        (GRIDWORLD_BP, "gridworld-bp", "gridworld", "betterproto2", None),
    ] + [
        (f"ours, {env} env, {c} concurrent sessions", env, "ours", "concurrent", c)
        for env in ("sync", "async")
        for c in conc
    ]

    if ns.only:
        wanted = [w for w in ns.only.split("|") if w]
        plan = [p for p in plan if any(w in p[0] for w in wanted) or "ceiling" in p[0]]
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in plan}
    t_start = time.time()
    load_start = os.getloadavg()[0]
    for rep in range(ns.repeats):  # alternate: every system once per repeat
        for name, cmd in servers.items():
            rows = [p for p in plan if p[1] == name]
            if not rows:
                continue
            if isinstance(cmd, str):
                ctx = upstream(cmd)
            elif cmd[-1] == "--http-ready-file":
                ctx = http_server(cmd[:-1])
            else:
                ctx = server(cmd)
            with ctx as (url, _pid):
                for label, _, kind, scenario, k in rows:
                    r = client(kind, scenario, url, ns.duration, k, "grpclib" if label.startswith(H2) else "grpcio")
                    results[label].append(r)
                    print(
                        f"[{rep + 1}/{ns.repeats}] {label}: "
                        f"{r.get('steps_per_s', float('nan')):,.0f}/s {r.get('error') or ''}"
                        f"{' errors: ' + '; '.join(r['error_samples']) if r.get('error_samples') else ''}",
                        file=sys.stderr,
                    )

    micro: list[dict[str, Any]] = []
    if not ns.only or ns.only in MICRO_LABEL:
        out = subprocess.run(
            [PY, CODECS, "--repeats", str(ns.repeats)], capture_output=True, text=True, env=ENV, timeout=600, check=True
        )
        micro = json.loads(out.stdout.strip().splitlines()[-1])

    handoff: dict[str, float] = {}
    if not ns.only or "hand-off" in ns.only:  # sync environments' thread hand-off (tools/bench/handoff.py)
        out = subprocess.run(
            [PY, HANDOFF, "--repeats", str(ns.repeats)],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=600,
            check=True,
        )
        handoff = json.loads(out.stdout.strip().splitlines()[-1])

    coldstart: dict[str, Any] = {}
    if not ns.only or "cold start" in ns.only:  # process start -> first step, idle RSS, density (coldstart.py)
        cmd = [PY, COLDSTART, "--repeats", str(ns.repeats), "--sessions", str(idle_n)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=1800)
        if done.returncode == 0:
            coldstart = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            print(f"cold start bench failed: {done.stderr[-2000:]}", file=sys.stderr)

    sandbox: dict[str, Any] = {}
    if not ns.only or "sandbox" in ns.only:  # a sandboxed call, before/after openenv.sandbox (sandbox.py)
        done = subprocess.run(
            [PY, SANDBOX, "--repeats", str(ns.repeats)], capture_output=True, text=True, env=ENV, timeout=1800
        )
        if done.returncode == 0:
            sandbox = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            print(f"sandbox bench failed: {done.stderr[-2000:]}", file=sys.stderr)

    selfplay: dict[str, Any] = {}
    if not ns.only or "self-play" in ns.only:  # a self-play agent against random (selfplay.py): rates, not times
        cmd = [PY, SELFPLAY, *(["--games", "1000", "--eval-games", "200"] if ns.quick else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=3600)
        if done.returncode == 0:
            selfplay = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            print(f"self-play bench failed: {done.stderr[-2000:]}", file=sys.stderr)

    budget: dict[str, Any] = {}
    if not ns.only or "budget" in ns.only:  # issue 49: CPU per round trip per path, beside its budget (budget.py)
        with tempfile.TemporaryDirectory() as d:
            out_json = os.path.join(d, "budget.json")
            cmd = [PY, BUDGET, "--repeats", str(ns.repeats), "--duration", str(ns.duration), "--json", out_json]
            done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=1800)
            if done.returncode == 0:
                budget = json.loads(Path(out_json).read_text())
            else:
                print(f"budget bench failed: {done.stderr[-2000:]}", file=sys.stderr)

    memory: dict[str, Any] = {}
    with server(servers["sync"]) as (url, pid):
        time.sleep(0.5)
        before = rss_kib(pid)
        proc = subprocess.Popen(
            [PY, CLIENT, "--kind", "ours", "--scenario", "idle", "--url", url, "--k", str(idle_n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdout.readline()  # {"opened": k}
        time.sleep(0.5)
        after = rss_kib(pid)
        proc.stdin.close()
        proc.wait(60)
        memory = {
            "idle_server_rss_mib": before / 1024,
            "sessions": idle_n,
            "rss_with_sessions_mib": after / 1024,
            "per_idle_session_kib": (after - before) / idle_n,
        }

    ceiling = median_of(results["raw grpc.aio bidi echo (ceiling)"], "steps_per_s")
    table = []
    for label, *_ in plan:
        runs = results[label]
        sps = median_of(runs, "steps_per_s")
        table.append(
            {
                "scenario": label,
                "steps_per_s": sps,
                "p50_ms": median_of(runs, "p50_ms"),
                "p99_ms": median_of(runs, "p99_ms"),
                "errors": sum(r.get("errors", 0) for r in runs) + sum(1 for r in runs if r.get("error")),
                "vs_ceiling": sps / ceiling,
                "runs": [round(r["steps_per_s"]) for r in runs if "steps_per_s" in r],
                "requests_per_message": median_of(runs, "requests_per_message"),
            }
        )
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "repeats": ns.repeats,
        "duration_s": ns.duration,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": round(time.time() - t_start),
        # Other work on the machine during the run (1-minute load average at the start and end).
        "load_avg": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "table": table,
                "memory": memory,
                "codec_micro": micro,
                "handoff_us": handoff,
                "coldstart": coldstart,
                "sandbox": sandbox,
                "selfplay": selfplay,
                "budget": budget,
            },
            indent=2,
        )
    )
    lines = [
        f"Machine: {meta['machine']}; {meta['repeats']} alternating repeats of {meta['duration_s']} s, "
        f"medians; {meta['date']}; load average {meta['load_avg'][0]} at the start, {meta['load_avg'][1]} at the end.",
        "",
        "| scenario | steps/s (median) | x ceiling | p50 ms | p99 ms | errors | runs |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in table:
        lines.append(
            f"| {row['scenario']} | {row['steps_per_s']:,.0f} | {row['vs_ceiling']:.2f} | "
            f"{row['p50_ms']:.3f} | {row['p99_ms']:.3f} | {row['errors']} | "
            f"{', '.join(f'{x:,}' for x in row['runs'])} |"
        )
    lines += [
        "",
        f"Memory: idle server RSS {memory['idle_server_rss_mib']:.1f} MiB; "
        f"{memory['sessions']} idle sessions add {memory['per_idle_session_kib']:.1f} KiB each.",
    ]
    if budget:
        from tools.bench.budget import markdown as budget_markdown

        lines += ["", *budget_markdown(budget)]
    if handoff:
        lines += [
            "",
            f"Sync environment hand-off, one call to a worker thread and back (µs, median of {ns.repeats}): "
            + "; ".join(f"{k} {v:.1f}" for k, v in handoff.items())
            + f" (EnvThreads / run_in_executor = {handoff['EnvThreads'] / handoff['run_in_executor']:.2f}).",
        ]
    if coldstart:
        lines += [
            "",
            f"Cold start and density (medians of {ns.repeats}; idle sessions: {idle_n}, each opened and reset):",
            "",
            "| system | start -> ready s | start -> first step s | idle RSS MiB | RSS per idle session KiB |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for c in coldstart.values():
            per = f"{c['per_session_kib']:.1f}" if "per_session_kib" in c else ""
            lines.append(
                f"| {c['label']} | {c['start_to_ready_s']:.2f} | {c['start_to_first_step_s']:.2f} | "
                f"{c['idle_rss_mib']:.1f} | {per} |"
            )
    if sandbox:
        lines += [
            "",
            f"A sandboxed call (medians of {ns.repeats}; code runs `sum(range(1000))`):",
            "",
            "| system | ms per call | x bare interpreter |",
            "| --- | ---: | ---: |",
            *(f"| {name} | {v['ms_per_call']:.1f} | {v['vs_bare']:.2f} |" for name, v in sandbox.items()),
        ]
    if selfplay:
        lines += [
            "",
            f"Self-play (examples/selfplay.py, {selfplay['game']}): a tabular agent trained on "
            f"{selfplay['training_games']} games against itself, then {selfplay['eval_games_per_seat']} games "
            "per seat against a uniformly random opponent, beside a random agent in the same seat "
            "(score: win 1, draw 1/2):",
            "",
            "| seat | trained win | draw | loss | random win | draw | loss | score trained / random |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for seat, t in selfplay["trained_vs_random"].items():
            b = selfplay["random_vs_random"][seat]
            lines.append(
                f"| {seat} | {t['win']:.1%} | {t['draw']:.1%} | {t['loss']:.1%} | {b['win']:.1%} | {b['draw']:.1%} | "
                f"{b['loss']:.1%} | {t['score_ratio']:.2f} |"
            )
    by_label = {row["scenario"]: row for row in table}
    if GRIDWORLD_PB2 in by_label and GRIDWORLD_BP in by_label:
        lines += [
            "",
            f"gridworld over gRPC, betterproto2 types / pb2 types (same run): "
            f"{by_label[GRIDWORLD_BP]['steps_per_s'] / by_label[GRIDWORLD_PB2]['steps_per_s']:.2f}x steps/s.",
        ]
    pipelining = pipelined_ratios(by_label)
    if pipelining:
        lines += ["", "Pipelined k=16 (coalesced, RFC 0009) against sequential rows of the same run:", "", *pipelining]
    if micro:
        lines += [
            "",
            f"{MICRO_LABEL} (µs, median of {ns.repeats}):",
            "",
            "| message | bytes | pb2 (upb) µs | betterproto2 µs | betterproto2 / pb2 |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name in dict.fromkeys(r["message"] for r in micro):
            pb_us, bp_us, size = (
                *(
                    next(r["us_per_encode_decode"] for r in micro if r["message"] == name and r["types"] == t)
                    for t in ("pb2 (upb)", "betterproto2")
                ),
                next(r["bytes"] for r in micro if r["message"] == name),
            )
            lines.append(f"| {name} | {size} | {pb_us:.2f} | {bp_us:.1f} | {bp_us / pb_us:.0f}x |")
    if not ns.only or "fleet" in ns.only:  # issue 16: the fleet rows (tools/bench/fleet.py)
        fleet_cmd = [PY, str(ROOT / "tools" / "bench" / "fleet.py"), "--out", str(out)]
        done = subprocess.run([*fleet_cmd, *(["--quick"] if ns.quick else [])], env=ENV, timeout=1800)
        if done.returncode == 0:
            lines += ["", *(out / "fleet.md").read_text().splitlines()]
    if not ns.only or "scaling" in ns.only:  # issue 34: workers, OpenEnv's scaling shape (scaling.py)
        scaling_cmd = [PY, str(ROOT / "tools" / "bench" / "scaling.py"), "--out", str(out)]
        if ns.quick:  # the small sizes only: 16,384 sessions take minutes on 2 cores
            scaling_cmd += ["--sessions", "1024", "--handshake-sessions", "1024"]
        done = subprocess.run(scaling_cmd, env=ENV, timeout=7200)
        if done.returncode == 0:
            lines += ["", *(out / "scaling.md").read_text().splitlines()]
    status = 0
    if ns.compare:
        regressions, compared = compare(json.loads(Path(ns.compare).read_text()), table, ns.tolerance)
        lines += [
            "",
            f"Compared with {ns.compare} (ratios to each run's own ceiling; tolerance {ns.tolerance:.0%}):",
            "",
        ]
        lines += compared
        if regressions:
            lines += ["", f"**{len(regressions)} regression(s) over {ns.tolerance:.0%}**: " + "; ".join(regressions)]
            status = 1
        else:
            lines += ["", f"No regression over {ns.tolerance:.0%}."]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return status


def pipelined_ratios(by_label: dict[str, dict[str, Any]]) -> list[str]:
    """Each pipelined k=16 row's steps/s over stock OpenEnv's and our own sequential rows of the
    same env kind (issue 19's target: >= 3x OpenEnv sequential), and requests per message."""
    out = []
    for label, row in by_label.items():
        if "pipelined k=16" not in label:
            continue
        kind = "sync" if "sync env" in label and "async env" not in label else "async"
        ours_seq = label.replace("pipelined k=16", "sequential")
        parts = []
        for base in (f"stock OpenEnv, {kind} env, sequential (WebSocket)", ours_seq):
            if base in by_label and by_label[base]["steps_per_s"]:
                parts.append(f"{row['steps_per_s'] / by_label[base]['steps_per_s']:.2f}x {base}")
        if row.get("requests_per_message"):
            parts.append(f"{row['requests_per_message']:.1f} requests per message")
        if parts:
            out.append(f"- {label}: " + "; ".join(parts))
    return out


def compare(baseline: dict[str, Any], table: list[dict[str, Any]], tolerance: float) -> tuple[list[str], list[str]]:
    """Rows of both runs, compared by their ratio to their own run's ceiling (absolute steps/s
    move with the machine's load; the ratio much less). A row whose ratio fell by more than
    ``tolerance`` is a regression."""
    before = {row["scenario"]: row for row in baseline.get("table", [])}
    lines = ["| scenario | baseline x ceiling | now x ceiling | change |", "| --- | ---: | ---: | ---: |"]
    regressions = []
    for row in table:
        old = before.get(row["scenario"])
        if old is None or not old.get("vs_ceiling") or row["vs_ceiling"] != row["vs_ceiling"]:
            continue
        change = row["vs_ceiling"] / old["vs_ceiling"] - 1
        flag = " **regression**" if change < -tolerance else ""
        if flag:
            regressions.append(f"{row['scenario']} {change:+.0%}")
        lines.append(f"| {row['scenario']} | {old['vs_ceiling']:.2f} | {row['vs_ceiling']:.2f} | {change:+.0%}{flag} |")
    return regressions, lines


if __name__ == "__main__":
    sys.exit(main())
