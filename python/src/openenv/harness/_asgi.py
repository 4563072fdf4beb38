"""A small ASGI toolkit for the harness's loopback servers (proxy, scripted model, tool relay).

:class:`LoopbackServer` runs an ASGI app on uvicorn inside the caller's event loop (``await
start()`` binds, port 0 picks a free one); :func:`serve_in_thread` runs one in a thread of its
own for synchronous callers (tests, the CLI). The helpers read a request body and write JSON or
Server-Sent Events, which is all these servers speak.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import uvicorn

from openenv.http.listener import UvicornListener

__all__ = ["LoopbackServer", "UnixServer", "read_body", "send_json", "serve_in_thread", "sse_start"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Requests larger than this are refused (413): a prompt with its history is far smaller.
MAX_BODY = 64 * 1024 * 1024


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int = MAX_BODY) -> bytes:
    """The whole request body (raises :class:`BodyTooLarge` past ``limit``)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise BodyTooLarge(f"request body over {limit} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def send_json(send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(payload).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def sse_start(send: Send, status: int = 200) -> None:
    head = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": status, "headers": head})


def _config(app: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        loop="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=5,
    )


class LoopbackServer:
    """An ASGI app on uvicorn in the current event loop, bound to ``host:port`` (the HTTP
    side's :class:`~openenv.http.listener.UvicornListener`, with a plain config)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self.requested_port = app, host, port
        self.port: int | None = None
        self._listener: UvicornListener | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> LoopbackServer:
        listener = UvicornListener(_config(self.app), self.host, self.requested_port, backlog=512)
        await listener.start()
        self._listener, self.port = listener, listener.port
        return self

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()

    async def __aenter__(self) -> LoopbackServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the embedding program owns signals
        yield


class UnixServer:
    """An ASGI app on uvicorn in the current event loop, on a UNIX socket at ``path`` (mode
    0600): how the runner's server reaches agents whose jail has a network of its own."""

    def __init__(self, app: Any, path: str) -> None:
        self.app, self.path = app, path
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    async def start(self) -> UnixServer:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            os.chmod(self.path, 0o600)
            sock.listen(512)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._sock, self._server = sock, _Server(_config(self.app))
        self._task = task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if task.done():
                exc = task.exception()
                await self.stop()
                raise RuntimeError(f"server on {self.path} failed to start: {exc}") from exc
            await asyncio.sleep(0.005)
        return self

    async def stop(self) -> None:
        server, task, sock = self._server, self._task, self._sock
        self._server = self._task = self._sock = None
        if server is not None:
            server.should_exit = True
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), 10)
            if not task.done():
                if server is not None:
                    server.force_exit = True
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if sock is not None:
            sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class ThreadServer:
    """A :class:`LoopbackServer` running in a thread with its own event loop."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = LoopbackServer(app, host, port)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="openenv-harness-server", daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as e:  # noqa: BLE001 - reported to the starting thread
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        self._loop.close()

    def start(self) -> ThreadServer:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"server failed to start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def __enter__(self) -> ThreadServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> ThreadServer:
    """Start ``app`` on ``host:port`` in a background thread; ``.url``, ``.stop()``."""
    return ThreadServer(app, host, port).start()
