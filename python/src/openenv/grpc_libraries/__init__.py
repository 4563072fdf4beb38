"""gRPC libraries: which one carries the protocol's gRPC listener (``ServerSettings.grpc_library``,
``openenv serve --grpc-library``). ``openenv.engines`` until 0.2 ("engine" is now the protocol
engine, :class:`openenv.engine.Engine`); the old path forwards, with a ``DeprecationWarning``.

``grpcio`` (grpc.aio; the reference engine and the default) is :class:`openenv.server.Server`;
``grpclib`` (pure-Python HTTP/2 on the event loop; the ``grpclib`` extra) is
:class:`~openenv.grpc_libraries.grpclib_server.GrpclibServer`. Both speak the same wire protocol and
pass the same certification; docs/performance.md measures them side by side.
"""

from __future__ import annotations

from typing import Any

from openenv.server import Server
from openenv.settings import DEFAULT_GRPC_LIBRARY, GRPC_LIBRARIES

__all__ = ["DEFAULT_ENGINE", "ENGINES", "server_class"]

ENGINES = GRPC_LIBRARIES  # declared with the other settings
DEFAULT_ENGINE = DEFAULT_GRPC_LIBRARY
GRPCLIB_EXTRA = "the grpclib engine needs the grpclib extra: pip install 'protoenv[grpclib]'"


def server_class(engine: str) -> Any:
    """The listener class of ``engine`` (one of :data:`ENGINES`); ValueError otherwise, and
    ImportError naming the extra when the engine's library is not installed."""
    if engine == "grpcio":
        return Server
    if engine == "grpclib":
        try:
            from openenv.grpc_libraries.grpclib_server import GrpclibServer
        except ImportError as e:
            if (e.name or "").partition(".")[0] not in ("grpclib", "h2", "hpack", "hyperframe", "multidict"):
                raise
            raise ImportError(f"{GRPCLIB_EXTRA} ({e})") from e
        return GrpclibServer
    raise ValueError(f"unknown gRPC engine {engine!r}: expected one of {', '.join(ENGINES)}")
