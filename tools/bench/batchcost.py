#!/usr/bin/env python3
"""The runtime's own cost per instance of a batch step, without I/O (docs/performance.md).

Server side: parse a ``batch_step`` request of N actions, decode them, ``VectorSession.step``,
encode the N time steps and serialize the answer. Client side: encode N actions, parse N time
steps. The counter environments of ``python/tests/bridge/bridge_envs.py``; the minimum over
``--batches`` batches after the first (the first warms up: a sync hook starts on the threads).

``python tools/bench/batchcost.py --env AsyncBenchCounter --n 64`` prints one JSON line.
Run it alternately against two checkouts to compare them in the same minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests" / "bridge"))

import bridge_envs  # noqa: E402

import openenv  # noqa: E402
from openenv.protocol import StepResult  # noqa: E402
from openenv.runtime.session import EnvironmentRuntime, SessionManager  # noqa: E402
from openenv.runtime.vector import VectorSession  # noqa: E402
from openenv.server import fill_time_step  # noqa: E402
from openenv.v1 import environment_pb2  # noqa: E402
from openenv.values import to_value  # noqa: E402


async def server_side(rt: EnvironmentRuntime, n: int, batches: int) -> float:
    req = environment_pb2.SessionRequest()
    for _ in range(n):
        to_value({"delta": 1}, req.batch_step.actions.add().json)
    data = req.SerializeToString()
    mgr = SessionManager(rt)
    vs = VectorSession(await mgr.open_many(n), 0)
    await vs.reset([], [], None)
    best = float("inf")
    try:
        for b in range(batches + 1):
            t0 = time.perf_counter()
            r = environment_pb2.SessionRequest.FromString(data)
            actions = [rt.action_codec.decode(a) for a in r.batch_step.actions]
            ids, results, _ = await vs.step([], actions, None)
            resp = environment_pb2.SessionResponse()
            out = resp.batch_step
            out.env_ids.extend(ids)
            for x in results:
                fill_time_step(out.time_steps.add(), x, rt)
            resp.SerializeToString()
            if b:
                best = min(best, time.perf_counter() - t0)
    finally:
        await mgr.shutdown()
    return best / n


def client_side(rt: EnvironmentRuntime, n: int, batches: int) -> float:
    resp = environment_pb2.SessionResponse()
    for k in range(n):
        obs = bridge_envs.CounterObservation(k)
        fill_time_step(resp.batch_step.time_steps.add(), StepResult(obs, 1.0, metadata={"step": k}, step_count=k), rt)
    data = resp.SerializeToString()
    client = openenv.EnvClient("grpc://127.0.0.1:1")  # never connected: only its codecs are used
    client.info = rt.info
    actions: list[Any] = [{"delta": 1}] * n
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        req = environment_pb2.SessionRequest()
        for a in actions:
            client.encode_action(a, req.batch_step.actions.add())
        req.SerializeToString()
        [client.parse_result(ts) for ts in environment_pb2.SessionResponse.FromString(data).batch_step.time_steps]
        best = min(best, time.perf_counter() - t0)
    return best / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="AsyncBenchCounter", help="a class of bridge_envs")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batches", type=int, default=40)
    ns = ap.parse_args()
    rt = EnvironmentRuntime(getattr(bridge_envs, ns.env), max_sessions=max(ns.n, 1))
    server = asyncio.run(server_side(rt, ns.n, ns.batches))
    print(
        json.dumps(
            {
                "env": ns.env,
                "n": ns.n,
                "server_us_per_instance": round(server * 1e6, 2),
                "client_us_per_instance": round(client_side(rt, ns.n, ns.batches) * 1e6, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
