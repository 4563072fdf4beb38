"""OpenEnv's HTTP/WebSocket surface for openenv environments (the Hugging Face Space path).

* :class:`BridgeApp`: the ASGI application (``/ws``, ``/mcp``, ``/health``, ``/metadata``,
  ``/schema``, ``/openapi.json``) over a :class:`Backend`;
* :class:`LocalBackend`: the sessions of an in-process server (what ``openenv serve``
  uses for its HTTP side, sharing the gRPC side's ``SessionManager``);
* :class:`RemoteBackend`: a remote gRPC environment server (``openenv bridge``);
* :class:`HttpServer`: uvicorn in the running event loop;
* :class:`ObservedApp`: ``/metrics``, the ``/web`` playground, and the metrics, logs and
  traces of every request, in front of a :class:`BridgeApp`.

Stock OpenEnv clients work unchanged against it; docs/bridge.md has the wire details.
Needs the ``http`` extra (uvicorn, websockets, mcp).
"""

from openenv.bridge.app import BridgeApp
from openenv.bridge.backend import Backend, EngineSession, LocalBackend
from openenv.bridge.http import DEFAULT_HTTP_PORT, HttpOptions, HttpServer
from openenv.bridge.observe import ObservedApp
from openenv.bridge.remote import RemoteBackend

__all__ = [
    "DEFAULT_HTTP_PORT",
    "Backend",
    "BridgeApp",
    "EngineSession",
    "HttpOptions",
    "HttpServer",
    "LocalBackend",
    "ObservedApp",
    "RemoteBackend",
]
