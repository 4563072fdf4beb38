"""Serve an OpenEnv app with OpenEnv's own stack (uvicorn), on a port chosen by the OS.

Runs inside the upstream OpenEnv virtualenv: ``python upstream_serve.py MODULE:APP
READY_FILE [--ws IMPL]``. Binds 127.0.0.1 port 0, writes ``http://127.0.0.1:PORT`` to
READY_FILE (atomically) and serves until SIGTERM/SIGINT, with uvicorn's defaults (the
way OpenEnv's Dockerfiles run ``uvicorn server.app:app``).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import uvicorn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("app")
    ap.add_argument("ready_file")
    ap.add_argument("--ws", default="auto")
    ap.add_argument("--loop", default="auto")
    ap.add_argument("--http", default="auto")
    ns = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    config = uvicorn.Config(ns.app, log_level="warning", ws=ns.ws, loop=ns.loop, http=ns.http)
    server = uvicorn.Server(config)
    tmp = ns.ready_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"http://127.0.0.1:{sock.getsockname()[1]}")
    os.replace(tmp, ns.ready_file)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
