"""The protocol engine: ``openenv.v1.EnvironmentService`` for any transport.

One :class:`Engine` serves an environment's sessions; every listener is an adapter that turns
its transport into :class:`Stream`\\ s (gRPC on grpc.aio or grpclib, the binary WebSocket,
OpenEnv's JSON ``/ws`` by translation, the in-process connection of :mod:`openenv.testing`).
A new transport implements :class:`Stream` (read, write, abort, peer, metadata, encode_result,
relayed) and calls :meth:`Engine.serve`; it checks :meth:`Engine.refusal` first when it carries
tokens. What clients are told the server enforces (``Capabilities``) is written by the engine from
its settings (:func:`advertise`), whichever listeners carry its streams.
"""

from openenv.engine._engine import (
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    Engine,
    advertise,
    bounded_serializer,
    fill_time_step,
    status_of,
)
from openenv.engine._stream import Incoming, Prepared, Stream
from openenv.runtime.granularity import Undecodable, tolerant_parse

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT_S",
    "Engine",
    "Incoming",
    "advertise",
    "Prepared",
    "Stream",
    "Undecodable",
    "bounded_serializer",
    "fill_time_step",
    "status_of",
    "tolerant_parse",
]
