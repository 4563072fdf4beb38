"""A server's live load from the client side (RFC 0005): ``GetLoad`` over gRPC.

::

    load = await get_load(channel)          # an open grpc.aio channel to the server
    load.sessions_open, load.max_sessions   # openenv.v1.ServerLoad

    fetch_load("127.0.0.1:50051")           # blocking, for scripts and the CLI

A server older than RFC 0005 answers ``UNIMPLEMENTED``, raised as
:class:`openenv.errors.Unimplemented`; an unreachable one as ``Unavailable``. A server that
requires a token (RFC 0003) requires it of ``GetLoad`` too: pass ``token=``.
"""

from __future__ import annotations

import grpc

from openenv.errors import EnvError
from openenv.security import grpc_channel_credentials
from openenv.v1 import environment_pb2_grpc, load_pb2

__all__ = ["fetch_load", "free_slots", "get_load", "load_score"]


def _error(e: grpc.RpcError, target: str) -> EnvError:
    code = e.code()  # every RpcError a call raises is also a grpc.Call
    return EnvError.from_code(code.value[0], f"GetLoad on {target}: {e.details() or code.name}")


def _metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


async def get_load(
    channel: grpc.aio.Channel, timeout: float = 5.0, *, target: str = "", token: str | None = None
) -> load_pb2.ServerLoad:
    """The live load of the server at the other end of ``channel`` (``token``: the bearer
    token a server that requires one needs, RFC 0003)."""
    try:
        resp = await environment_pb2_grpc.EnvironmentServiceStub(channel).GetLoad(
            load_pb2.GetLoadRequest(), timeout=timeout, metadata=_metadata(token)
        )
    except grpc.aio.AioRpcError as e:
        raise _error(e, target or "the server") from None
    load: load_pb2.ServerLoad = resp.load
    return load


def fetch_load(
    target: str, timeout: float = 5.0, *, token: str | None = None, secure: bool = False, ca_file: str | None = None
) -> load_pb2.ServerLoad:
    """The live load of the server at ``target`` (``host:port``), blocking; ``token`` as for
    :func:`get_load`, ``secure``: over TLS, trusting ``ca_file`` (default: gRPC's roots)."""
    ch = grpc.secure_channel(target, grpc_channel_credentials(ca_file)) if secure else grpc.insecure_channel(target)
    with ch:
        try:
            resp = environment_pb2_grpc.EnvironmentServiceStub(ch).GetLoad(
                load_pb2.GetLoadRequest(), timeout=timeout, metadata=_metadata(token)
            )
        except grpc.RpcError as e:
            raise _error(e, target) from None
    load: load_pb2.ServerLoad = resp.load
    return load


def free_slots(load: load_pb2.ServerLoad) -> int:
    """Sessions the server can still open (0 while it drains)."""
    return 0 if load.draining else max(0, load.max_sessions - load.sessions_open)


def load_score(load: load_pb2.ServerLoad) -> float:
    """The fraction of the server's capacity in use, 0..1 (1 when full or draining):
    what placement minimises."""
    if load.draining or load.max_sessions == 0:
        return 1.0
    return min(1.0, load.sessions_open / load.max_sessions)
