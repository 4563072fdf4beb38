"""uvicorn in the caller's event loop, on a socket bound before it starts.

:class:`UvicornListener` is the one place that binds a listening socket (port 0 picks a free
port, so the bound port is known before anything is served), runs a ``uvicorn.Server`` on it
in the running loop, and stops it within a bound. The HTTP side (:class:`~openenv.http.server.
HttpServer`) and the harness's loopback servers (proxy, scripted model, tool relay) both run
on it, with their own ``uvicorn.Config``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

__all__ = ["UvicornListener", "listen_backlog"]


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the embedding program owns signals
        yield


def listen_backlog(max_connections: int) -> int:
    """The accept queue of a listening socket that may hold ``max_connections``: at least
    2,048 (the kernel caps it at ``net.core.somaxconn``). asyncio's default, 100, drops the
    SYNs of a connect burst beyond it: the clients retry after 1, 3, 7, 15, 31, 63 s and give
    up after about two minutes (4,096 binary sessions at once: connect p99 61 s, 2 % failed)."""
    return max(2048, max_connections)


class UvicornListener:
    """``config`` served on ``host:port`` by uvicorn in the current event loop.

    ``await start()`` binds and returns once uvicorn accepts (raising ``RuntimeError`` naming
    the address when it cannot bind, or uvicorn's reason when it fails to start); ``await
    stop()`` closes connections, waits up to ``stop_timeout_s`` for uvicorn's own graceful
    shutdown, then forces it. Both are idempotent.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        host: str,
        port: int,
        *,
        backlog: int = 2048,
        stop_timeout_s: float = 10.0,
        reuse_port: bool = False,
    ) -> None:
        self.config, self.host, self.requested_port = config, host, port
        self.reuse_port = reuse_port  # SO_REUSEPORT: several worker processes share the port
        self.backlog, self.stop_timeout_s = backlog, stop_timeout_s
        self.port: int | None = None
        self.server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    async def start(self, what: str = "") -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((self.host, self.requested_port))
        except OSError as e:
            sock.close()
            raise RuntimeError(f"cannot bind {what}{self.host}:{self.requested_port}: {e.strerror or e}") from e
        sock.listen(self.backlog)
        sock.setblocking(False)
        self._sock, self.port = sock, sock.getsockname()[1]
        self.server = server = _Server(self.config)
        self._task = asyncio.ensure_future(self._run(server, sock))
        while not server.started:
            if self._task.done():
                exc = self._task.exception()
                await self.stop()
                raise RuntimeError(f"{what}server failed to start: {exc}") from exc
            await asyncio.sleep(0.005)

    @staticmethod
    async def _run(server: uvicorn.Server, sock: socket.socket) -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as e:  # uvicorn exits on a startup failure
            raise RuntimeError(f"uvicorn exited ({e.code})") from None

    async def stop(self) -> None:
        server, task, sock = self.server, self._task, self._sock
        self.server = self._task = self._sock = None
        if server is not None:
            server.should_exit = True
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), self.stop_timeout_s)
            if not task.done():
                if server is not None:
                    server.force_exit = True
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if sock is not None:
            sock.close()
