"""A raw ``Session`` stream on a connection of its own, over gRPC or the binary WebSocket, for
the tests of tokens across workers (test_worker_tokens.py, test_workers.py): bytes in,
``SessionResponse``s out, and how the server ended the stream."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from openenv.server import SERVICE_NAME
from openenv.v1 import environment_pb2 as pb
from openenv.values import to_value

WAIT = 60.0  # hang guard only
SUB = "openenv.v1+proto"


def hello(rid: int = 1, **kw: Any) -> pb.SessionRequest:
    return pb.SessionRequest(request_id=rid, handshake=pb.HandshakeRequest(protocol_version="1.0", **kw))


def step(rid: int, delta: int) -> pb.SessionRequest:
    req = pb.SessionRequest(request_id=rid)
    req.step.action.json.CopyFrom(to_value({"delta": delta}))
    return req


def reset(rid: int) -> pb.SessionRequest:
    return pb.SessionRequest(request_id=rid, reset=pb.ResetRequest())


def close(rid: int) -> pb.SessionRequest:
    return pb.SessionRequest(request_id=rid, close=pb.CloseRequest())


class Raw:
    """One stream: :meth:`open` it on ``url`` (``grpc://`` or ``ws://``), a TCP connection of
    its own (a connection lives in one worker)."""

    def __init__(self) -> None:
        self.channel: Any = None
        self.call: Any = None
        self.ws: Any = None

    @classmethod
    async def open(cls, url: str, token: str | None = None, *, deadline_s: float | None = None) -> Raw:
        """``deadline_s``: the gRPC call's deadline."""
        self = cls()
        if url.startswith("grpc://"):
            self.channel = grpc.aio.insecure_channel(
                url.removeprefix("grpc://"), options=[("grpc.use_local_subchannel_pool", 1)]
            )
            session = self.channel.stream_stream(
                f"/{SERVICE_NAME}/Session",
                request_serializer=lambda b: b,
                response_deserializer=pb.SessionResponse.FromString,
            )
            self.call = session(metadata=(("authorization", f"Bearer {token}"),) if token else None, timeout=deadline_s)
        else:
            from websockets.asyncio.client import connect

            headers = {"Authorization": f"Bearer {token}"} if token else None
            self.ws = await asyncio.wait_for(
                connect(url, subprotocols=[SUB], proxy=None, additional_headers=headers), WAIT
            )
        return self

    async def send(self, req: pb.SessionRequest | bytes) -> None:
        data = req.SerializeToString() if isinstance(req, pb.SessionRequest) else req
        if self.call is not None:
            await asyncio.wait_for(self.call.write(data), WAIT)
        else:
            await asyncio.wait_for(self.ws.send(data), WAIT)

    async def recv(self) -> pb.SessionResponse | None:
        """The next answer, or None once the server ended the stream (see :meth:`ended`)."""
        if self.call is not None:
            try:
                got = await asyncio.wait_for(self.call.read(), WAIT)
            except grpc.aio.AioRpcError:
                return None
            return None if got is grpc.aio.EOF else got
        from websockets.exceptions import ConnectionClosed

        try:
            data = await asyncio.wait_for(self.ws.recv(), WAIT)
        except ConnectionClosed:
            return None
        assert isinstance(data, bytes)
        return pb.SessionResponse.FromString(data)

    async def ask(self, req: pb.SessionRequest | bytes) -> pb.SessionResponse:
        await self.send(req)
        got = await self.recv()
        assert got is not None, f"the stream ended: {await self.ended()}"
        return got

    async def half_close(self) -> None:
        """The client's end of input (gRPC's half-close; the binary transport's empty message)."""
        if self.call is not None:
            await asyncio.wait_for(self.call.done_writing(), WAIT)
        else:
            await self.send(b"")

    async def ended(self) -> tuple[int, str]:
        """(The status code the server ended the stream with, 0 for none; its message)."""
        if self.call is not None:
            code = await asyncio.wait_for(self.call.code(), WAIT)
            return int(code.value[0]), str(await self.call.details() or "")
        await asyncio.wait_for(self.ws.wait_closed(), WAIT)
        code = int(self.ws.close_code or 0)
        return (code - 4000 if code >= 4000 else 0), str(self.ws.close_reason or "")

    async def drop(self) -> None:
        """The connection goes away under the stream (no close request)."""
        if self.call is not None:
            self.call.cancel()
            await self.channel.close()
        else:
            self.ws.transport.abort()

    async def aclose(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        elif self.ws is not None:
            self.ws.transport.abort()
