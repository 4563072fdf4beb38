"""The trainer's side: clients of environment servers, over any transport.

* :class:`EnvClient` (one instance), :class:`VectorEnvClient` (N instances, batched,
  :class:`BatchResult`), :class:`ToolEnvClient` (tool environments), each with ``.sync()``
  (:class:`SyncEnvClient`);
* :class:`BaseEnvClient`: what the two share (``isinstance`` of any session client);
* :class:`Connection`: the transport seam, with :class:`GrpcConnection` (``grpc://``),
  :class:`WsConnection` (OpenEnv's WebSocket protocol, ``http(s)://``/``ws(s)://``; the
  ``http`` extra), :class:`BinaryWsConnection` (the protocol over a WebSocket,
  ``ws(s)://host:port/v1/session``; the ``http`` extra) and
  :class:`openenv.client.inprocess.InProcessConnection` (no socket; :mod:`openenv.testing`),
  each configured by :class:`ConnectionOptions` and each a
  :class:`openenv.client.session.ClientSession` (the protocol's client half, written once)
  over its transport's :class:`openenv.client.channel.Channel`; decorators
  (:class:`ConnectionWrapper`, :class:`MapErrors`) compose behaviour around one;
* :func:`check_health`, :func:`parse_url`, :func:`split_url`.
"""

from openenv.client.binary import BinaryWsConnection
from openenv.client.connection import Connection, ConnectionWrapper, MapErrors
from openenv.client.env import (
    AUTORESET_MODES,
    BaseEnvClient,
    BatchResult,
    EnvClient,
    ToolEnvClient,
    VectorEnvClient,
    connect_url,
)
from openenv.client.grpc import GrpcConnection
from openenv.client.health import check_health
from openenv.client.options import ConnectionOptions
from openenv.client.sync import SyncEnvClient
from openenv.client.urls import WS_SCHEMES, parse_url, split_url
from openenv.client.ws import WsConnection

__all__ = [
    "AUTORESET_MODES",
    "WS_SCHEMES",
    "BaseEnvClient",
    "BatchResult",
    "BinaryWsConnection",
    "Connection",
    "ConnectionOptions",
    "ConnectionWrapper",
    "EnvClient",
    "GrpcConnection",
    "MapErrors",
    "SyncEnvClient",
    "ToolEnvClient",
    "VectorEnvClient",
    "WsConnection",
    "check_health",
    "connect_url",
    "parse_url",
    "split_url",
]
