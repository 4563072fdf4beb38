"""Serve a mutant: ``python -m mutants mutants.NAME READY_FILE`` (run with the tests
directory as the working directory). Writes the server's grpc:// URL to READY_FILE."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import openenv.server


def main(argv: list[str]) -> None:
    name, ready_file = argv
    mod = importlib.import_module(name)
    wire = getattr(mod, "Wire", None)
    if wire is not None:
        real = openenv.server._Servicer  # the one symbol of the runtime a wire mutant relies on

        def servicer(manager: Any) -> Any:
            return wire(real(manager))

        openenv.server._Servicer = servicer  # type: ignore[assignment,misc]

    def ready(server: openenv.server.Server) -> None:
        tmp = ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(server.address)
        os.replace(tmp, ready_file)

    kwargs = {"max_message_bytes": 1024 * 1024, **getattr(mod, "SERVER_KWARGS", {})}
    openenv.server.serve(mod.Env, "127.0.0.1", 0, ready=ready, grace_s=1.0, **kwargs)


if __name__ == "__main__":
    main(sys.argv[1:])
