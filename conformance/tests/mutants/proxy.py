"""A wrapper of the runtime's servicer that can rewrite requests and answers on the wire.

Wire mutants subclass :class:`Proxy` and override :meth:`request` (what the real servicer
reads), :meth:`answer` (what the client gets; return a list of answers to write, in
order) or :meth:`info` (what GetInfo returns). Everything else is the real runtime.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import environment_pb2_grpc


class _Stream:
    """The servicer's view of one Session stream: the real context, filtered."""

    def __init__(self, proxy: Proxy, context: Any) -> None:
        self.proxy, self.context = proxy, context
        self.pending: asyncio.Queue[Any] = asyncio.Queue()
        self.last: pb.SessionRequest | None = None
        self.requests: dict[int, pb.SessionRequest] = {}
        self.ended = False
        self.state: dict[str, Any] = {}
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            try:
                req = await self.context.read()
            except Exception as e:  # noqa: BLE001 - e.g. bytes that do not decode: re-raised by read()
                await self.pending.put(e)
                return
            await self.pending.put(req)
            if req is grpc.aio.EOF:
                return

    async def read(self) -> Any:
        if self.ended:
            return grpc.aio.EOF
        req = await self.pending.get()
        if isinstance(req, Exception):
            raise req
        if req is grpc.aio.EOF:
            for out in self.proxy.flush(self):
                await self.context.write(out)
            return req
        req = self.proxy.request(self, req)
        self.last = req
        return req

    async def write(self, resp: pb.SessionResponse) -> None:
        await self.proxy.before_answer(self, self.last, resp)
        for out in self.proxy.answer(self, self.last, resp):
            await self.context.write(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.context, name)


class Proxy(environment_pb2_grpc.EnvironmentServiceServicer):
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.manager = inner.manager

    # -- overridables

    def request(self, stream: _Stream, req: pb.SessionRequest) -> pb.SessionRequest:
        return req

    def answer(
        self, stream: _Stream, req: pb.SessionRequest | None, resp: pb.SessionResponse
    ) -> list[pb.SessionResponse]:
        return [resp]

    async def before_answer(self, stream: _Stream, req: pb.SessionRequest | None, resp: pb.SessionResponse) -> None:
        """Runs before :meth:`answer` (e.g. to wait, bounded, for the client's next request)."""

    def info(self, info: pb.GetInfoResponse) -> pb.GetInfoResponse:
        return info

    def load(self, load: Any) -> Any:
        """What GetLoad returns (an ``openenv.v1.GetLoadResponse``)."""
        return load

    def flush(self, stream: _Stream) -> list[pb.SessionResponse]:
        """Answers still held when the client half-closes."""
        return []

    async def disconnected(self, stream: _Stream) -> None:
        """The client went away (the stream was cancelled)."""

    # -- the service

    async def GetInfo(self, request: Any, context: Any) -> pb.GetInfoResponse:  # noqa: N802
        return self.info(await self.inner.GetInfo(request, context))

    async def GetLoad(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self.load(await self.inner.GetLoad(request, context))

    async def Session(self, request_iterator: Any, context: Any) -> None:  # noqa: N802
        stream = _Stream(self, context)
        try:
            await self.inner.Session(request_iterator, stream)
        except asyncio.CancelledError:
            await asyncio.shield(self.disconnected(stream))
            raise
        finally:
            stream._reader.cancel()
