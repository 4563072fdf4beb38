#!/usr/bin/env python3
"""Atari and MuJoCo over the vectorised path: env-steps/s at N=64, beside EnvPool-style figures.

``make bench`` runs it after the transport benchmarks (``python tools/bench/atari.py`` alone).
Rows, each the median of ``--repeats`` runs of ``--seconds`` (systems alternate):

* **served, batched N=64**: ``openenv serve import:ale:Pong --max-sessions 64`` in its own
  process, a client process stepping ONE vectorised session of 64 games (``make_vec``, one
  ``BatchStep`` per step of all 64, random actions, 84x84 grey frames back);
* **in-process, one env**: the same catalog class stepped in a loop, no transport (the
  ceiling one Python thread reaches);
* **ale-py AtariVectorEnv N=64**: ale-py's C++ vector env (EnvPool's design, threads in C++,
  84x84 grey, frame-skip 4), in-process: the EnvPool-style figure measured on this machine;
* the same three for MuJoCo's HalfCheetah-v5 (no C++ vector env: Gymnasium's SyncVectorEnv).

Each row reports env-steps/s and frames/s (env-steps x frame-skip, EnvPool's unit) and the
ratio to the C++ vector env. EnvPool's published figures (peers.md: 37,396 Atari frames/s for
its sync mode and 15,863 for a subprocess vector env on a 12-core laptop) are printed beside
for scale; this machine has 2 shared cores. Results: ``reports/atari_bench.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
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
PY = sys.executable
N = 64
FRAMESKIP = {"atari": 4, "mujoco": 5}
PUBLISHED = {  # EnvPool's README (peers.md), frames/s on a 12-core laptop
    "atari": {"EnvPool sync (12 cores)": 37_396, "gym subprocess vector env (12 cores)": 15_863},
    "mujoco": {"EnvPool async (12 cores)": 105_126},
}


def _env() -> dict[str, str]:
    return {**os.environ, "GRPC_VERBOSITY": "ERROR"}


def served(target: str, seconds: float, num_envs: int) -> float:
    """env-steps/s of a client process stepping one vectorised session against a server process."""
    with tempfile.TemporaryDirectory() as d:
        ready = Path(d) / "ready"
        cmd = [PY, "-m", "openenv.cli", "serve", target, "--port", "0", "--max-sessions", str(num_envs)]
        cmd += ["--idle-timeout", "0", "--ready-file", str(ready)]
        proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                    raise RuntimeError(f"{target} did not start: {err}")
                time.sleep(0.05)
            url = ready.read_text().strip()
            out = subprocess.run(
                [PY, __file__, "--client", url, "--seconds", str(seconds), "--num-envs", str(num_envs)],
                env=_env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode != 0:
                raise RuntimeError(f"client failed: {out.stderr[-2000:]}")
            return float(out.stdout.strip().splitlines()[-1])
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def client(url: str, seconds: float, num_envs: int) -> float:
    from openenv.gym import make_vec

    venv = make_vec(url, num_envs, timeout=900)  # the first reset loads 64 ROMs: setup, not measured
    try:
        venv.reset(seed=0)
        space = venv.action_space
        space.seed(0)
        for _ in range(3):  # warm up
            venv.step(space.sample())
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            venv.step(space.sample())
            steps += num_envs
        return steps / (time.perf_counter() - start)
    finally:
        venv.close()


def in_process(spec: str, seconds: float) -> float:
    from openenv_catalog import load

    cls = load(spec)
    env = cls()
    env.reset(seed=0)
    import numpy as np

    rng = np.random.default_rng(0)
    if spec.startswith("ale:"):
        n = int(cls.action_type["maximum"]) + 1

        def act() -> Any:
            return int(rng.integers(n))
    else:
        shape = tuple(cls.action_type.shape)

        def act() -> Any:
            return rng.uniform(-1, 1, shape).astype(np.float32)

    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        r = env.step(act())
        steps += 1
        if r.terminated or r.truncated:
            env.reset()
    env.close()
    return steps / (time.perf_counter() - start)


def native_vector(kind: str, seconds: float, num_envs: int) -> float:
    import numpy as np

    if kind == "atari":
        from ale_py.vector_env import AtariVectorEnv

        venv: Any = AtariVectorEnv("pong", num_envs, stack_num=1, repeat_action_probability=0.25)
    else:
        import gymnasium

        venv = gymnasium.make_vec("HalfCheetah-v5", num_envs, vectorization_mode="sync")
    venv.reset(seed=0)
    space = venv.action_space
    space.seed(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        venv.step(np.asarray(space.sample()))
        steps += num_envs
    rate = steps / (time.perf_counter() - start)
    venv.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-envs", type=int, default=N)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--only", choices=["atari", "mujoco"], default=None)
    args = ap.parse_args()
    if args.client:
        print(client(args.client, args.seconds, args.num_envs))
        return
    systems = {
        "atari": {
            f"served, batched N={args.num_envs} (import:ale:Pong)": lambda: served(
                "import:ale:Pong", args.seconds, args.num_envs
            ),
            "in-process, one env (ale:Pong, no transport)": lambda: in_process("ale:Pong", args.seconds),
            f"ale-py AtariVectorEnv N={args.num_envs} (C++ threads, EnvPool-style)": lambda: native_vector(
                "atari", args.seconds, args.num_envs
            ),
        },
        "mujoco": {
            f"served, batched N={args.num_envs} (import:mujoco:HalfCheetah-v5)": lambda: served(
                "import:mujoco:HalfCheetah-v5", args.seconds, args.num_envs
            ),
            "in-process, one env (mujoco:HalfCheetah-v5, no transport)": lambda: in_process(
                "mujoco:HalfCheetah-v5", args.seconds
            ),
            f"Gymnasium SyncVectorEnv N={args.num_envs} (HalfCheetah-v5, in-process)": lambda: native_vector(
                "mujoco", args.seconds, args.num_envs
            ),
        },
    }
    results: dict[str, Any] = {"num_envs": args.num_envs, "seconds": args.seconds, "repeats": args.repeats, "rows": []}
    lines = [
        f"# Simulators over the vectorised path (N={args.num_envs})",
        "",
        f"Load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. Medians of {args.repeats} runs "
        f"of {args.seconds:g} s.",
        "",
        "| kind | system | env-steps/s | frames/s | ratio to the in-process vector env | runs (env-steps/s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind, rows in systems.items():
        if args.only and kind != args.only:
            continue
        runs: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.repeats):
            for name, fn in rows.items():
                runs[name].append(fn())
                print(f"{kind}: {name}: {runs[name][-1]:,.0f} env-steps/s", file=sys.stderr)
        medians = {name: statistics.median(v) for name, v in runs.items()}
        base = list(medians.values())[-1]
        for name, med in medians.items():
            frames = med * FRAMESKIP[kind]
            results["rows"].append({"kind": kind, "system": name, "env_steps_per_s": med, "runs": runs[name]})
            shown = ", ".join(f"{r:,.0f}" for r in runs[name])
            lines.append(f"| {kind} | {name} | {med:,.0f} | {frames:,.0f} | {med / base:.2f}x | {shown} |")
        for name, fps in PUBLISHED[kind].items():
            lines.append(f"| {kind} | published: {name} | {fps / FRAMESKIP[kind]:,.0f} | {fps:,} | - | - |")
    text = "\n".join(lines) + "\n"
    out = ROOT / "reports"
    out.mkdir(exist_ok=True)
    (out / "atari_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "atari_bench.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
