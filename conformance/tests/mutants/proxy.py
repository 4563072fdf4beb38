"""A wrapper of the runtime's protocol engine that can rewrite requests and answers on the wire
(whatever the transport: gRPC on either engine, the binary WebSocket, the in-process connection).

Wire mutants subclass :class:`Proxy` and override :meth:`request` (what the real servicer
reads), :meth:`answer` (what the client gets; return a list of answers to write, in
order) or :meth:`info_of` (what GetInfo returns). Everything else is the real runtime.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.engine import Prepared
from openenv.v1 import environment_pb2 as pb


class _Stream:
    """The engine's view of one Session stream: the transport's stream, filtered."""

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
            if req is None:
                return

    async def read(self) -> Any:
        if self.ended:
            return None
        req = await self.pending.get()
        if isinstance(req, Exception):
            raise req
        if req is None:
            for out in self.proxy.flush(self):
                await self.context.write(out)
            return req
        if isinstance(req, Prepared):  # a translator's request (OpenEnv's /ws): its message is what a mutant sees
            req.request = self.last = self.proxy.request(self, req.request)
            return req
        req = self.proxy.request(self, req)
        self.last = req
        return req

    async def write(self, resp: pb.SessionResponse, *encoded: Any) -> None:
        await self.proxy.before_answer(self, self.last, resp)
        for out in self.proxy.answer(self, self.last, resp):
            # A translating transport's encoded time step goes with the answer it belongs to.
            await self.context.write(out, *encoded) if out is resp else await self.context.write(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.context, name)


class Proxy:
    """Stands for the engine (``openenv.engine.Engine``): what it does not override is the real one's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.manager = inner.manager

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- overridables

    def request(self, stream: _Stream, req: pb.SessionRequest) -> pb.SessionRequest:
        return req

    def answer(
        self, stream: _Stream, req: pb.SessionRequest | None, resp: pb.SessionResponse
    ) -> list[pb.SessionResponse]:
        return [resp]

    async def before_answer(self, stream: _Stream, req: pb.SessionRequest | None, resp: pb.SessionResponse) -> None:
        """Runs before :meth:`answer` (e.g. to wait, bounded, for the client's next request)."""

    def info_of(self, info: pb.GetInfoResponse) -> pb.GetInfoResponse:
        return info

    def load_of(self, load: Any) -> Any:
        """What GetLoad returns (an ``openenv.v1.GetLoadResponse``)."""
        return load

    def flush(self, stream: _Stream) -> list[pb.SessionResponse]:
        """Answers still held when the client half-closes."""
        return []

    async def disconnected(self, stream: _Stream) -> None:
        """The client went away (the stream was cancelled)."""

    # -- the engine

    def info(self) -> pb.GetInfoResponse:
        return self.info_of(self.inner.info())

    def load(self) -> Any:
        return self.load_of(self.inner.load())

    async def load_report(self) -> Any:
        """GetLoad's answer (measured now; the whole server's with several workers)."""
        return self.load_of(await self.inner.load_report())

    async def serve(self, context: Any, **kwargs: Any) -> None:
        stream = _Stream(self, context)
        try:
            await self.inner.serve(stream, **kwargs)
        except asyncio.CancelledError:
            await asyncio.shield(self.disconnected(stream))
            raise
        finally:
            stream._reader.cancel()
