"""How the catalog is certified: once per importer in full, once per entry for what differs.

An importer's entries share all of its code but the environment it wraps: the protocol, the
engine, sessions, vectors, concurrency and the adapter's generic translation are the same
code for every entry. So ``openenv catalog certify`` gives:

* **a full certificate** (``openenv certify python:TARGET``: every check, its own server in
  a subprocess) to every native environment and to each importer's representatives
  (its module's ``REPRESENTATIVES``, default its first curated id): the importer's generic
  code, certified over the wire as any environment;
* **an entry certificate** to every other entry: the checks whose outcome depends on the
  entry (:data:`ENTRY_CHECKS`: its declared types and example actions, observations against
  its types, invalid actions refused, reset/step/state smoke, same seed same episode, finite
  rewards, its tools), over gRPC on loopback against a server started in the worker process,
  many entries per worker process (the imports are paid once per worker, not per entry).

Workers run in parallel (``--jobs``), each taking the next entry as it finishes one (so one
slow entry does not hold a batch); ``python -m openenv_catalog.certify [TARGET...]`` is one
worker: it prints one JSON line per entry (targets from the arguments, or from stdin, one per
line, as they come).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ENTRY_CHECKS", "certify_entry", "main"]

ENTRY_CHECKS = (
    "protocol.get_info",
    "schema.*",
    "determinism.*",
    "rewards.*",
    "tools.*",
    "lifecycle.step_before_reset",
    "lifecycle.state_before_reset",
    "lifecycle.state_never_fails",
    "lifecycle.step_count",
    "lifecycle.episode_ids",
    "lifecycle.close",
)
"""The conformance checks of an entry certificate (shell patterns over check ids): what
differs between two entries of one importer. The rest (protocol, engine, concurrency,
vectors, sessions, parity, robustness, the state machine, a step after the end of an episode,
which walks whole episodes: 1000 steps of CarRacing) is the importer's generic code and the
runtime's, covered by its representatives' full certificates."""


@contextmanager
def _serving(factory: Any) -> Iterator[str]:
    """``factory`` served over gRPC on 127.0.0.1 (port 0) from a thread of this process."""
    import openenv

    loop = asyncio.new_event_loop()
    srv = openenv.Server(factory, "127.0.0.1", 0)
    started = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(srv.start())
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            failed.append(e)
            started.set()
            return
        started.set()
        loop.run_forever()

    t = threading.Thread(target=run, name="catalog-certify-server", daemon=True)
    t.start()
    if not started.wait(120) or failed:
        raise RuntimeError(f"the server did not start: {failed[0] if failed else 'timed out'}")
    try:
        yield srv.address
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        t.join(30)
        loop.close()


def certify_entry(target: str, *, seed: int | None, max_examples: int, timeout: float) -> dict[str, Any]:
    """The entry certificate of ``target`` (``import:SOURCE:ID`` or ``module:Class``): a summary
    of the conformance report of :data:`ENTRY_CHECKS`."""
    from openenv.cli.common import load_factory
    from openenv_conformance.runner import certify
    from openenv_conformance.targets import RunningTarget

    t0 = time.monotonic()
    try:
        factory = load_factory(target)
        with _serving(factory) as url:
            report = certify(
                RunningTarget(url), checks=ENTRY_CHECKS, seed=seed, max_examples=max_examples, timeout=timeout
            )
    except Exception as e:  # noqa: BLE001 - an entry that cannot even be served is not certified
        return {"exit_code": 2, "line": f"unusable: {type(e).__name__}: {e}", "results": [], "seconds": 0.0}
    counts = report.counts()
    failures = [
        {"id": r.id, "status": r.status, "reason": r.reason} for r in report.results if r.status in ("fail", "error")
    ]
    if report.unusable is not None:
        failures.append({"id": "target", "status": "error", "reason": report.unusable})
    secs = time.monotonic() - t0
    line = (
        f"{report.verdict.replace('CERTIFIED (', 'CERTIFIED (entry, ', 1)}: {counts.get('pass', 0)} passed, "
        f"{counts.get('fail', 0)} failed, {counts.get('error', 0)} errors, {counts.get('skip', 0)} skipped "
        f"in {secs:.1f} s (seed {report.seed})"
    )
    return {
        "exit_code": report.exit_code,
        "line": line,
        "counts": counts,
        "results": failures,
        "suite_version": report.suite_version,
        "seed": report.seed,
        "nondeterministic": bool(report.declared_nondeterministic),
        "seconds": round(secs, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """One worker: ``python -m openenv_catalog.certify [--seed N] [--max-examples N]
    [--timeout S] TARGET...``; one JSON line per target (``{"target", ...certificate}``)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m openenv_catalog.certify")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-examples", type=int, default=10)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("targets", nargs="*", help="Targets to certify; none: one per line on stdin, as they come.")
    args = p.parse_args(argv)
    targets: Any = args.targets or (line.strip() for line in sys.stdin if line.strip())
    # The certificates on the original stdout; whatever the environments print (reasoning-gym's
    # bf prints its programs' output) goes to stderr, never into a certificate's line.
    sys.stdout.flush()
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with results:
        for target in targets:
            cert = certify_entry(target, seed=args.seed, max_examples=args.max_examples, timeout=args.timeout)
            results.write(json.dumps({"target": target, **cert}) + "\n")
            results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
