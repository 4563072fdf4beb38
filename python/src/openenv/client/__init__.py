"""The trainer's side: clients of environment servers, over any transport.

* :class:`EnvClient` (one instance), :class:`VectorEnvClient` (N instances, batched,
  :class:`BatchResult`), :class:`ToolEnvClient` (tool environments), each with ``.sync()``
  (:class:`SyncEnvClient`);
* :class:`Connection`: the transport seam, with :class:`GrpcConnection` (``grpc://``) and
  :class:`WsConnection` (OpenEnv's WebSocket protocol, ``http(s)://``/``ws(s)://``; the
  ``http`` extra), :class:`BinaryWsConnection` (the protocol over a WebSocket,
  ``ws(s)://host:port/v1/session``; the ``http`` extra);
* :func:`check_health`, :func:`parse_url`, :func:`split_url`.
"""

from openenv.client.binary import BinaryWsConnection
from openenv.client.connection import Connection
from openenv.client.env import AUTORESET_MODES, BatchResult, EnvClient, ToolEnvClient, VectorEnvClient, connect_url
from openenv.client.grpc import GrpcConnection
from openenv.client.health import check_health
from openenv.client.sync import SyncEnvClient
from openenv.client.urls import WS_SCHEMES, parse_url, split_url
from openenv.client.ws import WsConnection

__all__ = [
    "AUTORESET_MODES",
    "WS_SCHEMES",
    "BatchResult",
    "BinaryWsConnection",
    "Connection",
    "EnvClient",
    "GrpcConnection",
    "SyncEnvClient",
    "ToolEnvClient",
    "VectorEnvClient",
    "WsConnection",
    "check_health",
    "connect_url",
    "parse_url",
    "split_url",
]
