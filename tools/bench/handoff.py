"""The hand-off of a sync environment call to a worker thread, without I/O (part of ``make bench``).

Per call, on uvloop, sequential (as one session's steps are): ``loop.run_in_executor`` on a
``ThreadPoolExecutor`` (the runtime's hand-off before issue 19), the runtime's
:class:`openenv.runtime.threads.EnvThreads`, and a direct call (``run_in_thread = False``).
Methods alternate within each repeat; prints one JSON line of medians (µs per call).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import statistics
import time
from typing import Any

from openenv.runtime.threads import EnvThreads


def trivial(x: int) -> int:
    return x + 1


async def measure(n: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(8)
    threads = EnvThreads(8)
    out: dict[str, float] = {}
    try:
        t = time.perf_counter()
        for i in range(n):
            await loop.run_in_executor(pool, trivial, i)
        out["run_in_executor"] = (time.perf_counter() - t) / n * 1e6
        t = time.perf_counter()
        for i in range(n):
            await threads.submit(lambda i=i: trivial(i))
        out["EnvThreads"] = (time.perf_counter() - t) / n * 1e6
        t = time.perf_counter()
        for i in range(n):
            trivial(i)
        out["direct call"] = (time.perf_counter() - t) / n * 1e6
    finally:
        pool.shutdown()
        threads.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5000)
    ns = ap.parse_args()
    try:
        import uvloop

        run: Any = uvloop.run
    except ImportError:
        run = asyncio.run
    runs = [run(measure(ns.calls)) for _ in range(ns.repeats)]
    print(json.dumps({k: statistics.median(r[k] for r in runs) for k in runs[0]}))


if __name__ == "__main__":
    main()
