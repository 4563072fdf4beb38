"""Serve a mutant: ``python -m mutants mutants.NAME READY_FILE [HTTP_READY_FILE]`` (run with
the tests directory as the working directory). Writes the server's grpc:// URL to READY_FILE
and the URL of its HTTP side (OpenEnv's JSON protocol) to HTTP_READY_FILE.

A mutant module may replace one piece of the runtime: ``Wire`` wraps the protocol engine
(``openenv.engine.Engine``, so a wire mutant is seen on every transport the engine serves),
``HttpBackend`` replaces the HTTP side's backend (``openenv.http.LocalBackend``, read by
``openenv.Host``), ``Vector`` the vectorised session (``openenv.engine._engine.VectorSession``);
``setup()``, when defined, is called first (a mutant that changes the runtime's internals does
it there, in its own server process only: importing the module, as the tests do, changes
nothing)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import openenv.engine
import openenv.engine._engine
import openenv.host
import openenv.http


def main(argv: list[str]) -> None:
    name, ready_file, *rest = argv
    http_file = rest[0] if rest else ""
    mod = importlib.import_module(name)
    setup = getattr(mod, "setup", None)
    if setup is not None:
        setup()
    wire = getattr(mod, "Wire", None)
    if wire is not None:
        real = openenv.engine.Engine  # the one symbol of the runtime a wire mutant relies on

        def engine(manager: Any, *args: Any, **kwargs: Any) -> Any:  # the server's other arguments
            return wire(real(manager, *args, **kwargs))

        openenv.engine.Engine = engine  # type: ignore[assignment,misc]
    backend = getattr(mod, "HttpBackend", None)
    if backend is not None:
        openenv.http.LocalBackend = backend  # type: ignore[misc]  # read by Host.start
    vector = getattr(mod, "Vector", None)
    if vector is not None:
        openenv.engine._engine.VectorSession = vector  # type: ignore[misc]

    def write(path: str, text: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def ready(server: openenv.host.Host) -> None:
        write(ready_file, server.address or "")
        if http_file and server.http_url:
            write(http_file, server.http_url)

    # A 3 s handshake deadline (the default is 10 s): protocol.handshake_deadline waits it out in
    # every mutant's run, and no mutant is about the deadline's length.
    kwargs = {
        "max_message_bytes": 1024 * 1024,
        "http_port": 0,
        "handshake_timeout_s": 3.0,
        **getattr(mod, "SERVER_KWARGS", {}),
    }
    http_port = kwargs.pop("http_port")
    settings = openenv.ServerSettings.of(None, kwargs)
    openenv.host.serve(mod.Env, "127.0.0.1", 0, ready=ready, grace_s=1.0, http_port=http_port, settings=settings)


if __name__ == "__main__":
    main(sys.argv[1:])
