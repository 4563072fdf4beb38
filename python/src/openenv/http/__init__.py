"""The HTTP side of a server: OpenEnv's HTTP/WebSocket surface (the Hugging Face Space path),
MCP, the binary WebSocket transport, ``/metrics`` and the playground.

(``openenv.bridge`` until 0.2: the HTTP side is not a bridge; the remote proxy of ``openenv
bridge`` is, and keeps that name. The old paths forward, with a ``DeprecationWarning``.)


* :class:`BridgeApp`: the ASGI application (``/ws``, ``/mcp``, ``/health``, ``/metadata``,
  ``/schema``, ``/openapi.json``) over a :class:`Backend`;
* :class:`LocalBackend`: the sessions of an in-process server (what ``openenv serve``
  uses for its HTTP side, sharing the gRPC side's ``SessionManager``);
* a remote gRPC environment server behind it (``openenv bridge``): :mod:`openenv.bridge`;
* :class:`HttpServer`: uvicorn in the running event loop;
* :class:`ObservedApp`: ``/metrics``, the ``/web`` playground, and the metrics, logs and
  traces of every request, in front of a :class:`BridgeApp`.

Stock OpenEnv clients work unchanged against it; docs/bridge.md has the wire details.
Needs the ``http`` extra (uvicorn, websockets, mcp).
"""

from openenv.http.app import BridgeApp
from openenv.http.backend import Backend, EngineSession, LocalBackend
from openenv.http.observe import ObservedApp
from openenv.http.server import DEFAULT_HTTP_PORT, HttpOptions, HttpServer

__all__ = [
    "DEFAULT_HTTP_PORT",
    "Backend",
    "EngineSession",
    "BridgeApp",
    "HttpOptions",
    "HttpServer",
    "LocalBackend",
    "ObservedApp",
]
