"""A server for the hostile-load tests (test_hostile_load.py), in a process of its own so that
its memory is measured from /proc alone: the echo environment on every listener (gRPC, HTTP
with ``/ws`` and ``/v1/session``, the binary listener), with the HTTP limits given as JSON
(and ``handshake_timeout_s``, the server's).

    python hostile_server.py READY_DIR '{"message_timeout_s": 2}' [WORKERS]

writes ``grpc``, ``http`` and ``binary`` (their URLs) into READY_DIR once serving, and drains
on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from echo_env.server import EchoEnvironment
from openenv import Host
from openenv.settings import HttpLimits, HttpSettings, Limits, ServerSettings


async def main(ready: Path, limits: dict[str, float], workers: int) -> None:
    handshake = limits.pop("handshake_timeout_s", Limits().handshake_timeout_s)
    settings = ServerSettings(
        limits=Limits(handshake_timeout_s=handshake), http=HttpSettings(limits=HttpLimits(**limits)), workers=workers
    )
    host = Host(EchoEnvironment, "127.0.0.1", 0, http_port=0, binary_port=0, settings=settings)
    await host.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    for name, url in (("grpc", host.address), ("http", host.http_url), ("binary", host.binary_url)):
        (ready / f"{name}.tmp").write_text(url or "")
        (ready / f"{name}.tmp").rename(ready / name)
    await stop.wait()
    await host.stop(2.0)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1))
