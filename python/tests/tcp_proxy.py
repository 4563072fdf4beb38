"""A loopback TCP proxy a test controls: it forwards connections to an upstream port and can
drop every connection at once (an abortive close, RST, as a network blip or a proxy restart
does) or stop listening altogether (the server unreachable)."""

from __future__ import annotations

import asyncio
import contextlib
import socket


class TcpProxy:
    """``async with TcpProxy(upstream_port) as p:`` then connect to ``p.port``."""

    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.upstream_port = host, upstream_port
        self.port = 0
        self.accepted = 0  # connections accepted so far
        self.dropped = 0  # connections dropped by drop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer)),
            asyncio.ensure_future(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in pumps:
                t.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()

    def drop(self) -> int:
        """Reset every open connection, both sides; returns how many pairs were cut."""
        n = 0
        for w in list(self._writers):
            sock = w.get_extra_info("socket")
            if sock is not None:  # SO_LINGER 0: close() sends RST, like a crashed middlebox
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            w.transport.abort()
            n += 1
        self._writers.clear()
        self.dropped += n // 2
        return n // 2

    async def stop_listening(self) -> None:
        """Refuse new connections (the port is closed) and drop the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.drop()
        if server is not None:
            await server.wait_closed()

    async def close(self) -> None:
        await self.stop_listening()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
