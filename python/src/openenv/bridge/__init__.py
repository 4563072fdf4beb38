"""``openenv bridge``: the HTTP side in front of a remote gRPC environment server.

:class:`RemoteBackend` opens one gRPC ``Session`` stream to the remote server per bridged
session, so an environment written in any language gets OpenEnv's HTTP/WebSocket surface
(:mod:`openenv.http`) without stubs: payloads are converted with the remote's advertised
descriptors. ``openenv.serve_bridge`` / ``openenv bridge TARGET`` run it.

Until 0.2 this package also held the HTTP side of every server; those names moved to
:mod:`openenv.http` and still resolve here, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

import openenv.http as _http_side
from openenv.bridge.remote import RemoteBackend, RemoteRelay

__all__ = ["RemoteBackend", "RemoteRelay"]


def __getattr__(name: str) -> Any:
    # The 0.1 names of the HTTP side (BridgeApp, LocalBackend, HttpServer, ...).
    if name.startswith("__") or not hasattr(_http_side, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"openenv.bridge.{name} moved to openenv.http.{name}; the old path goes away in 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_http_side, name)
