#!/usr/bin/env python3
"""CPU of the protocol's handshake without a socket: ``--sessions`` sessions opened one after
another through the in-process connection (``openenv.testing.InProcessServer``: the engine,
the session manager and the client's request path, no transport), with the environment's
description by digest (RFC 0013) and without (the client names none, as before 1.4).

Process CPU time per handshake (client and server are this one process): load on the machine
slows the run but does not inflate the figure much, unlike wall time. Prints one JSON line per
(environment, digest) with the median of ``--repeats`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "python" / "src"), str(ROOT / "envs" / "gridworld" / "src")]


async def rounds(target: str, n: int, repeats: int, digest: bool) -> float:
    from openenv.client import inprocess
    from openenv.testing import InProcessServer

    module, name = target.split(":")
    env = getattr(importlib.import_module(module), name)
    keep = inprocess.known_digest
    inprocess.known_digest = keep if digest else (lambda server: "")  # type: ignore[assignment]
    out = []
    try:
        async with InProcessServer(env, max_sessions=n + 1) as srv:
            for _ in range(repeats):
                clients = [srv.client() for _ in range(n)]
                t0 = time.process_time()
                for c in clients:
                    await c.connect()
                out.append((time.process_time() - t0) / n * 1e6)
                for c in clients:
                    await c.close()
    finally:
        inprocess.known_digest = keep
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ns = ap.parse_args()
    for target in ("tools.bench.envs:AsyncEcho", "gridworld.server:GridWorldEnvironment"):
        for digest in (False, True):
            us = asyncio.run(rounds(target, ns.sessions, ns.repeats, digest))
            print(json.dumps({"env": target, "digest": digest, "cpu_us_per_handshake": round(us, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
