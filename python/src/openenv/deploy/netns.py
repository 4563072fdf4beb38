"""Reach a TCP port inside a container that has no network (``network_mode=none``).

A container without a network has only its own loopback, so nothing can be published.
:class:`NetnsForwarder` listens on ``127.0.0.1:<free port>`` on the host and, for each
connection, opens a socket *inside the container's network namespace* (``setns(2)`` in a
short-lived thread; the socket stays in that namespace after the thread ends) to
``127.0.0.1:<port>`` there, then copies bytes both ways.

It needs the engine on this host and the right to enter the namespace
(``CAP_SYS_ADMIN``, i.e. root); :func:`check_netns_access` says why not otherwise.
Linux only.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import socket
import threading
from concurrent.futures import Future
from typing import Any

from openenv.errors import FailedPrecondition

__all__ = ["NetnsForwarder", "check_netns_access"]

_CLONE_NEWNET = 0x40000000
_libc: Any = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def check_netns_access(pid: int) -> None:
    """Raise :class:`FailedPrecondition` unless this process can enter ``pid``'s network namespace."""
    path = f"/proc/{pid}/ns/net"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise FailedPrecondition(
            f"cannot open {path} ({e.strerror}): network_none needs a Docker engine on this host and root"
        ) from e
    os.close(fd)
    if os.geteuid() != 0:
        raise FailedPrecondition("network_none needs root (entering the container's network namespace)")


def _connect_in(pid: int, port: int, timeout: float) -> socket.socket:
    """A TCP connection to 127.0.0.1:port inside pid's network namespace."""
    result: Future[socket.socket] = Future()

    def run() -> None:  # a fresh thread: its namespace change dies with it
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            s.settimeout(None)
            s.setblocking(False)
            result.set_result(s)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting side
            result.set_exception(e)

    threading.Thread(target=run, name="openenv-netns-connect", daemon=True).start()
    return result.result(timeout + 5)


class NetnsForwarder:
    """``127.0.0.1:<port>`` on the host → ``127.0.0.1:<target_port>`` in a container's namespace."""

    def __init__(self, pid: int, target_port: int) -> None:
        check_netns_access(pid)
        self.pid, self.target_port = pid, target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="openenv-netns-forward", daemon=True)

    def start(self) -> NetnsForwarder:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = fut.result(10)
        return self

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        inner_writer: asyncio.StreamWriter | None = None
        try:
            sock = await asyncio.get_running_loop().run_in_executor(None, _connect_in, self.pid, self.target_port, 5.0)
            inner_reader, inner_writer = await asyncio.open_connection(sock=sock)
            await asyncio.gather(_pump(reader, inner_writer), _pump(inner_reader, writer))
        except (OSError, TimeoutError):
            pass  # the server inside is not listening (yet): drop the connection, the client retries
        finally:
            for w in (writer, inner_writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    def close(self) -> None:
        """Stop listening and drop every forwarded connection. Idempotent."""
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, asyncio.IncompleteReadError):
        writer.close()
