"""Benchmark client: runs one scenario against one server and prints one JSON line.

``python tools/bench/client.py --kind ours --scenario seq --url grpc://127.0.0.1:PORT``

Kinds: ``raw`` (the generated stub in lock step: the grpc.aio ceiling) and ``ours``
(:class:`openenv.EnvClient`). Scenarios: seq, pipelined, batched, concurrent, tools,
reset, idle (open sessions and hold them). Kind ``gridworld``: the typed gridworld client in
lock step, scenario ``pb2`` (the ``_pb2`` classes, upb) or ``betterproto2`` (the dataclasses
of the betterproto facade); run it against the server declared with the same types.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import grpc

import openenv
from openenv.v1 import environment_pb2, environment_pb2_grpc


def summary(n: int, elapsed: float, lat: list[float], errors: int = 0, **extra: Any) -> dict[str, Any]:
    lat.sort()
    q = (lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3) if lat else (lambda p: float("nan"))
    return {"steps_per_s": n / elapsed, "p50_ms": q(0.50), "p99_ms": q(0.99), "n": n, "errors": errors, **extra}


async def raw_seq(url: str, duration: float) -> dict[str, Any]:
    target = url.split("://", 1)[-1]
    async with grpc.aio.insecure_channel(target) as ch:
        call = environment_pb2_grpc.EnvironmentServiceStub(ch).Session()
        await call.write(environment_pb2.SessionRequest(request_id=1, handshake={"protocol_version": "1.0"}))
        await call.read()
        lat: list[float] = []
        n, t0 = 0, time.perf_counter()
        end = t0 + duration
        while True:
            s = time.perf_counter()
            if s >= end:
                break
            n += 1
            req = environment_pb2.SessionRequest(request_id=n + 1)
            req.step.action.json.struct_value.update({"delta": 1})
            await call.write(req)
            await call.read()
            lat.append(time.perf_counter() - s)
        elapsed = time.perf_counter() - t0
        await call.done_writing()
        return summary(n, elapsed, lat)


async def ours_loop(client: openenv.EnvClient, end: float, lat: list[float], action: Any = None) -> int:
    n = 0
    while True:
        s = time.perf_counter()
        if s >= end:
            return n
        n += 1
        await client.step({"delta": 1} if action is None else action)
        lat.append(time.perf_counter() - s)


async def ours_seq(url: str, duration: float, action: Any = None) -> dict[str, Any]:
    async with openenv.EnvClient(url) as c:
        await c.reset()
        lat: list[float] = []
        t0 = time.perf_counter()
        n = await ours_loop(c, t0 + duration, lat, action)
        return summary(n, time.perf_counter() - t0, lat)


async def ours_tools(url: str, duration: float) -> dict[str, Any]:
    return await ours_seq(url, duration, openenv.CallToolAction("echo_message", {"message": "hello"}))


async def ours_reset(url: str, duration: float) -> dict[str, Any]:
    async with openenv.EnvClient(url) as c:
        lat: list[float] = []
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration:
            s = time.perf_counter()
            await c.reset(seed=n)
            n += 1
            lat.append(time.perf_counter() - s)
        return summary(n, time.perf_counter() - t0, lat)


async def ours_pipelined(url: str, duration: float, k: int) -> dict[str, Any]:
    """k steps kept in flight on one session (a sliding window)."""
    async with openenv.EnvClient(url) as c:
        await c.reset()
        n, t0 = 0, time.perf_counter()
        end = t0 + duration
        inflight: set[asyncio.Future[Any]] = set()
        while True:
            now = time.perf_counter()
            while len(inflight) < k and now < end:
                n += 1
                inflight.add(asyncio.ensure_future(c.step({"delta": 1})))
            if not inflight:
                break
            done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for d in done:
                d.result()
        elapsed = time.perf_counter() - t0
        conn = c.connection
        sent = getattr(conn, "messages_sent", 0)  # the gRPC connection coalesces (RFC 0009)
        extra = {"requests_per_message": (n + 2) / sent} if sent else {}  # + handshake, reset
        return summary(n, elapsed, [], k=k, **extra)


async def ours_batched(url: str, duration: float, k: int) -> dict[str, Any]:
    """One vectorised session of k instances, stepped with one message per batch."""
    async with openenv.EnvClient(url, num_envs=k, autoreset_mode="next_step") as c:
        await c.reset_batch()
        actions = [{"delta": 1}] * k
        lat: list[float] = []
        batches, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration:
            s = time.perf_counter()
            await c.step_batch(actions)
            batches += 1
            lat.append(time.perf_counter() - s)
        return summary(batches * k, time.perf_counter() - t0, lat, k=k)


async def ours_concurrent(url: str, duration: float, k: int) -> dict[str, Any]:
    """k sessions stepping concurrently from one client process; latency per step."""
    clients = [openenv.EnvClient(url, connect_timeout=60) for _ in range(k)]
    failures: list[BaseException] = []
    for i in range(0, k, 64):  # connect in waves: a burst of k handshakes is its own benchmark
        res = await asyncio.gather(*(c.connect() for c in clients[i : i + 64]), return_exceptions=True)
        failures += [r for r in res if isinstance(r, BaseException)]
    live = [c for c in clients if c.session_id]
    await asyncio.gather(*(c.reset() for c in live))
    lat: list[float] = []
    t0 = time.perf_counter()
    res = await asyncio.gather(*(ours_loop(c, t0 + duration, lat) for c in live), return_exceptions=True)
    elapsed = time.perf_counter() - t0
    failures += [r for r in res if isinstance(r, BaseException)]
    n = sum(r for r in res if isinstance(r, int))
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    samples = sorted({f"{type(e).__name__}: {e}"[:160] for e in failures})[:3]
    return summary(n, elapsed, lat, errors=len(failures), sessions=len(live), k=k, error_samples=samples)


async def ours_idle(url: str, duration: float, k: int) -> dict[str, Any]:
    """Open k sessions, report, hold them until stdin closes (the driver measures RSS)."""
    clients = [openenv.EnvClient(url, connect_timeout=60) for _ in range(k)]
    for i in range(0, k, 64):
        await asyncio.gather(*(c.connect() for c in clients[i : i + 64]))
    print(json.dumps({"opened": k}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return {"closed": k}


async def gridworld_seq(url: str, duration: float, types: str) -> dict[str, Any]:
    """Sequential typed steps on gridworld (moves cycle; a new seeded episode when one ends)."""
    if types == "pb2":
        from gridworld import Action, GridWorldEnv, Move

        env_cls: type[openenv.EnvClient] = GridWorldEnv
        actions = [Action(move=m) for m in (Move.MOVE_UP, Move.MOVE_RIGHT, Move.MOVE_DOWN, Move.MOVE_LEFT)]
    else:
        from gridworld.facade import Action as BpAction
        from gridworld.facade import GridWorldBetterprotoEnv
        from gridworld.facade import Move as BpMove

        env_cls = GridWorldBetterprotoEnv
        actions = [BpAction(move=m) for m in (BpMove.UP, BpMove.RIGHT, BpMove.DOWN, BpMove.LEFT)]
    async with env_cls(url) as c:
        episode = 0
        await c.reset(seed=episode)
        lat: list[float] = []
        n, t0 = 0, time.perf_counter()
        end = t0 + duration
        while True:
            s = time.perf_counter()
            if s >= end:
                break
            r = await c.step(actions[n % 4])
            n += 1
            lat.append(time.perf_counter() - s)
            if r.done:
                episode += 1
                await c.reset(seed=episode)
        return summary(n, time.perf_counter() - t0, lat, episodes=episode)


async def gridworld_pb2(url: str, duration: float) -> dict[str, Any]:
    return await gridworld_seq(url, duration, "pb2")


async def gridworld_betterproto2(url: str, duration: float) -> dict[str, Any]:
    return await gridworld_seq(url, duration, "betterproto2")


async def _ws_sessions(url: str, k: int) -> list[Any]:
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://").rstrip("/") + "/ws"
    conns = []
    for _ in range(k):  # OpenEnv's client offers permessage-deflate; each server decides
        conns.append(await connect(ws_url, max_size=100 * 1024 * 1024, open_timeout=60))
    for ws in conns:
        await ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        r = json.loads(await ws.recv())
        if r.get("type") != "observation":
            raise RuntimeError(f"reset failed: {r}")
    return conns


async def _ws_loop(ws: Any, frame: str, end: float, lat: list[float]) -> int:
    n = 0
    while True:
        s = time.perf_counter()
        if s >= end:
            return n
        await ws.send(frame)
        r = await ws.recv()
        if '"type":"observation"' not in r[:40].replace(" ", ""):
            raise RuntimeError(f"unexpected reply {r[:200]}")
        n += 1
        lat.append(time.perf_counter() - s)


async def ws_concurrent(url: str, duration: float, k: int = 1, frame: dict[str, Any] | None = None) -> dict[str, Any]:
    """k OpenEnv WebSocket sessions stepping concurrently with OpenEnv's own frames."""
    conns = await _ws_sessions(url, k)
    text = json.dumps(frame or {"type": "step", "data": {"delta": 1}})
    lat: list[float] = []
    try:
        await asyncio.gather(*(_ws_loop(ws, text, time.perf_counter() + 0.2, []) for ws in conns))  # warm-up
        t0 = time.perf_counter()
        res = await asyncio.gather(*(_ws_loop(ws, text, t0 + duration, lat) for ws in conns), return_exceptions=True)
        elapsed = time.perf_counter() - t0
    finally:
        await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
    errors = sum(isinstance(r, BaseException) for r in res)
    return summary(sum(r for r in res if isinstance(r, int)), elapsed, lat, errors=errors, k=k)


async def ws_seq(url: str, duration: float) -> dict[str, Any]:
    return await ws_concurrent(url, duration, 1)


async def ws_tools(url: str, duration: float) -> dict[str, Any]:
    """OpenEnv's MCP step path: a call_tool action as a step."""
    return await ws_concurrent(
        url,
        duration,
        1,
        {"type": "step", "data": {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hello"}}},
    )


SCENARIOS = {
    ("ws", "seq"): ws_seq,
    ("ws", "concurrent"): ws_concurrent,
    ("ws", "tools"): ws_tools,
    ("raw", "seq"): raw_seq,
    ("ours", "seq"): ours_seq,
    ("ours", "tools"): ours_tools,
    ("ours", "reset"): ours_reset,
    ("ours", "pipelined"): ours_pipelined,
    ("ours", "batched"): ours_batched,
    ("ours", "concurrent"): ours_concurrent,
    ("ours", "idle"): ours_idle,
    ("gridworld", "pb2"): gridworld_pb2,
    ("gridworld", "betterproto2"): gridworld_betterproto2,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", required=True, choices=sorted({k for k, _ in SCENARIOS}))
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--k", type=int, default=None)
    ns = ap.parse_args()
    fn = SCENARIOS.get((ns.kind, ns.scenario))
    if fn is None:
        sys.exit(f"no scenario {ns.scenario!r} for kind {ns.kind!r}")
    args: list[Any] = [ns.url, ns.duration] + ([ns.k] if ns.k is not None else [])
    try:
        import uvloop  # type: ignore[import-not-found]

        result = uvloop.run(fn(*args))
    except ImportError:
        result = asyncio.run(fn(*args))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
