"""Several server processes behind the same ports: ``--workers N`` (``Host(workers=N)``).

One server process runs its sessions on one core. With ``workers`` > 1, :class:`openenv.Host`
becomes a supervisor of N *worker* processes, each a complete server (its own
:class:`~openenv.runtime.SessionManager`, gRPC listener, HTTP side and binary listener), all
listening on the same ports with ``SO_REUSEPORT``: the kernel spreads new connections over the
workers, and a session lives in the worker that accepted its connection (its stream never
moves). What this module provides:

* :class:`PortReservation`: the supervisor binds each port once (without listening) so that a
  port 0 becomes one concrete port every worker then binds, and keeps it while it serves, so a
  restarted worker gets the same port back.
* :class:`Supervisor`: starts the workers (``multiprocessing`` *spawn*: a fresh interpreter,
  no inherited threads or gRPC state), restarts one that dies (only its sessions are lost: their
  clients see UNAVAILABLE and resume where the session allows), and on SIGTERM drains every
  worker (each drains its own sessions) and waits for all of them.
* :class:`WorkerPeers`: each worker answers its siblings on a Unix socket of a private
  directory (``load`` and ``metrics``), so the worker that receives ``GetLoad``, ``GET /load``,
  ``GET /health`` or ``GET /metrics`` reports the whole server (counters summed exactly) and
  each worker (``GetLoadResponse.workers``, ``openenv_worker_*`` metrics; RFC 0013).

Where the OS does not balance connections over ``SO_REUSEPORT`` listeners (it does on Linux;
macOS and Windows do not), the fallback is one worker, with a warning: run a fleet of servers
there (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from openenv.observability.metrics import merge_expositions
from openenv.runtime.load import sum_loads
from openenv.v1 import load_pb2

log = logging.getLogger("openenv.workers")

__all__ = [
    "PEER_TIMEOUT_S",
    "PortReservation",
    "Supervisor",
    "WorkerConfig",
    "WorkerFactory",
    "WorkerPeers",
    "reuseport_balances",
]

PEER_TIMEOUT_S = 5.0
"""How long a worker waits for a sibling's answer (a hang guard: siblings answer from memory)."""

_READY_TIMEOUT_S = 120.0  # a worker imports the environment and binds: slow machines, big envs
_MAX_BACKOFF_S = 10.0


def reuseport_balances() -> bool:
    """True where ``SO_REUSEPORT`` spreads connections over the listeners of a port (Linux)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


@dataclasses.dataclass(frozen=True)
class WorkerFactory:
    """A factory each worker builds itself, from a picklable ``load(target)`` (e.g. ``openenv
    serve``'s loader of ``module:Class``), for factories that cannot be pickled themselves."""

    load: Callable[[str], Any]
    target: str

    def __call__(self) -> Any:
        return self.load(self.target)


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What a worker process is started with (pickled to it)."""

    factory: Any  # the environment factory, or a WorkerFactory that builds it
    host: str
    port: int | None
    http_port: int | None
    http_host: str | None
    binary_port: int | None
    settings: Any  # ServerSettings, workers=1
    grace_s: float
    run_dir: str
    count: int
    log_level: int
    keywords: dict[str, Any] = dataclasses.field(default_factory=dict)


class PortReservation:
    """Ports bound with ``SO_REUSEPORT`` but not listening (they take no connection): a port 0
    becomes a concrete port that every worker binds too; it stays reserved until :meth:`close`."""

    def __init__(self) -> None:
        self._socks: list[socket.socket] = []

    def reserve(self, host: str, port: int | None, what: str) -> int | None:
        if port is None:
            return None
        bind_host = host.strip("[]")
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        if bind_host in ("", "localhost"):
            bind_host = "127.0.0.1" if bind_host == "localhost" else "0.0.0.0"
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((bind_host, port))
        except OSError as e:
            sock.close()
            raise RuntimeError(f"cannot bind {what} on {host}:{port}: {e.strerror or e}") from e
        self._socks.append(sock)
        bound: int = sock.getsockname()[1]
        return bound

    def close(self) -> None:
        for s in self._socks:
            s.close()
        self._socks.clear()


# ---------------------------------------------------------------------------- in each worker


class WorkerPeers:
    """A worker's view of its siblings: it answers them on ``run_dir/<index>.sock`` and asks
    them, so any worker reports the whole server (exact sums of counters) and each worker."""

    def __init__(
        self,
        run_dir: str,
        index: int,
        count: int,
        restarts: int,
        local_load: Callable[[], load_pb2.ServerLoad],
        local_metrics: Callable[[], bytes] | None,
    ) -> None:
        self.run_dir, self.index, self.count, self.restarts = run_dir, index, count, restarts
        self._local_load, self._local_metrics = local_load, local_metrics
        self._server: asyncio.AbstractServer | None = None
        self._last: load_pb2.GetLoadResponse | None = None

    def path(self, index: int) -> str:
        return os.path.join(self.run_dir, f"{index}.sock")

    async def start(self) -> None:
        path = self.path(self.index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a restarted worker's predecessor left it
        self._server = await asyncio.start_unix_server(self._answer, path=path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(OSError):
                os.unlink(self.path(self.index))

    def own(self) -> load_pb2.WorkerLoad:
        return load_pb2.WorkerLoad(
            index=self.index, pid=os.getpid(), up=True, restarts=self.restarts, load=self._local_load()
        )

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            what = (await asyncio.wait_for(reader.readline(), PEER_TIMEOUT_S)).strip()
            if what == b"load":
                writer.write(self.own().SerializeToString())
            elif what == b"metrics" and self._local_metrics is not None:
                writer.write(self._local_metrics())
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def ask(self, index: int, what: bytes) -> bytes | None:
        """A sibling's answer to ``what`` (``load``, ``metrics``), or None when it does not answer."""
        return await ask_worker(self.path(index), what)

    async def load(self) -> load_pb2.GetLoadResponse:
        """The whole server's load and each worker's."""
        others = await asyncio.gather(*(self.ask(i, b"load") for i in range(self.count) if i != self.index))
        it = iter(others)
        workers = [self.own() if i == self.index else _worker_load(i, next(it)) for i in range(self.count)]
        out = load_pb2.GetLoadResponse(load=sum_loads([w.load for w in workers if w.up]), workers=workers)
        self._last = out
        return out

    def cached_load(self) -> load_pb2.GetLoadResponse:
        """The last :meth:`load` answer with this worker's own part measured now (for callers
        that cannot wait, e.g. the binary listener's ``/load``; refreshed by any ``load``)."""
        last = self._last
        if last is None:
            own = self.own()
            return load_pb2.GetLoadResponse(load=own.load, workers=[own])
        out = load_pb2.GetLoadResponse()
        out.CopyFrom(last)
        out.workers[self.index].CopyFrom(self.own())
        out.load.CopyFrom(sum_loads([w.load for w in out.workers if w.up]))
        return out

    async def metrics(self) -> bytes:
        """The whole server's metrics: every worker's summed, plus ``openenv_worker_*`` per worker."""
        texts: list[bytes | None] = list(
            await asyncio.gather(
                *(self.ask(i, b"metrics") for i in range(self.count) if i != self.index),
            )
        )
        texts.insert(self.index, self._local_metrics() if self._local_metrics is not None else None)
        return merge_expositions(texts)

    async def health(self) -> tuple[int, int]:
        """(Workers that answered, workers)."""
        others = await asyncio.gather(*(self.ask(i, b"load") for i in range(self.count) if i != self.index))
        return 1 + sum(1 for o in others if o is not None), self.count


def _worker_load(index: int, data: bytes | None) -> load_pb2.WorkerLoad:
    if data is None:
        return load_pb2.WorkerLoad(index=index, up=False)
    w = load_pb2.WorkerLoad()
    try:
        w.ParseFromString(data)
    except Exception:  # noqa: BLE001 (a sibling cut off mid-answer: it died)
        return load_pb2.WorkerLoad(index=index, up=False)
    return w


async def ask_worker(path: str, what: bytes) -> bytes | None:
    """The answer of the worker at ``path`` to ``what``, or None when it does not answer."""

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_unix_connection(path)
        try:
            writer.write(what + b"\n")
            await writer.drain()
            return await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    try:
        data = await asyncio.wait_for(exchange(), PEER_TIMEOUT_S)
    except (OSError, TimeoutError):
        return None
    return data or None


# ---------------------------------------------------------------------------- the supervisor


class _Worker:
    __slots__ = ("conn", "index", "process", "restarts", "started")

    def __init__(self, index: int) -> None:
        self.index = index
        self.restarts = 0
        self.process: Any = None
        self.conn: Any = None
        self.started = 0.0


class Supervisor:
    """Runs ``config.count`` workers (``target(config, index, restarts, conn)`` in a spawned
    process each); restarts a worker that dies; drains them all on :meth:`stop`.

    ``target`` must be a module-level function (spawn pickles it by name); it sends one message
    on ``conn`` once serving (a dict of its URLs) or an ``("error", reason)`` tuple, and exits
    (after draining) on SIGTERM or when ``conn``'s other end closes (the supervisor is gone).
    """

    def __init__(self, target: Callable[..., None], config: WorkerConfig) -> None:
        self.target, self.config = target, config
        self.workers = [_Worker(i) for i in range(config.count)]
        self.urls: dict[str, str | None] = {}
        import multiprocessing  # here: a server of one process never needs it (test_lazy_imports)

        self._ctx: Any = multiprocessing.get_context("spawn")
        self._stopping = False
        self._done = asyncio.Event()
        self._restarting: set[int] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> Supervisor:
        """Start every worker; returns once all serve (RuntimeError naming the first failure)."""
        try:
            await asyncio.gather(*(self._spawn(w) for w in self.workers))
        except BaseException:
            await self.stop(0.0)
            raise
        return self

    async def _spawn(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe()  # a socket pair: the worker sees EOF when we are gone
        proc = self._ctx.Process(
            target=self.target,
            args=(self.config, w.index, w.restarts, child),
            name=f"openenv-worker-{w.index}",
            daemon=False,
        )
        proc.start()
        child.close()  # the worker holds the only write end: EOF here when it is gone
        w.process, w.conn, w.started = proc, parent, time.monotonic()
        loop = asyncio.get_running_loop()
        message = await loop.run_in_executor(None, _receive, parent, proc, _READY_TIMEOUT_S)
        if not isinstance(message, dict):
            proc.kill() if proc.is_alive() else None
            await loop.run_in_executor(None, proc.join, 5.0)
            raise RuntimeError(f"worker {w.index} did not start: {message}")
        self.urls = message
        loop.add_reader(proc.sentinel, self._exited, w, proc)
        log.info("worker %d serving (pid %d)", w.index, proc.pid)

    def _exited(self, w: _Worker, proc: Any) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            loop.remove_reader(proc.sentinel)
        if proc is not w.process or self._stopping:
            return
        task = asyncio.ensure_future(self._restart(w, proc, time.monotonic() - w.started))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, w: _Worker, proc: Any, lived: float) -> None:
        if proc is not None:
            await asyncio.get_running_loop().run_in_executor(None, proc.join, 5.0)  # reaped: its exit code
            log.warning(
                "worker %d (pid %d) died (exit code %s) after %.1f s: its sessions are lost; restarting it",
                w.index,
                proc.pid,
                proc.exitcode,
                lived,
            )
        # A worker that keeps dying at start is restarted less and less often.
        delay = 0.0 if lived > 10.0 else min(_MAX_BACKOFF_S, 0.5 * (2 ** min(w.restarts, 5)))
        if delay:
            await asyncio.sleep(delay)
        if self._stopping:
            return
        w.restarts += 1
        try:
            await self._spawn(w)
        except Exception as e:  # noqa: BLE001 (whatever failed, the worker is tried again)
            log.error("worker %d could not be restarted: %s; trying again", w.index, e)
            if not self._stopping:
                task = asyncio.ensure_future(self._restart(w, None, 0.0))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def pids(self) -> list[int | None]:
        return [w.process.pid if w.process is not None else None for w in self.workers]

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain every worker (SIGTERM: each refuses new sessions, finishes requests in progress
        for up to ``grace_s`` and ends its sessions) and wait for all of them; one still running
        ``grace_s`` + 15 s later is killed. Idempotent."""
        if self._stopping:
            await self._done.wait()
            return
        self._stopping = True
        for t in list(self._tasks):
            t.cancel()
        procs = [w.process for w in self.workers if w.process is not None]
        for p in procs:
            if p.is_alive():
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(p.pid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + grace_s + 15.0

        def join_all() -> None:
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
                if p.is_alive():
                    log.error("worker pid %d did not drain in time: killing it", p.pid)
                    p.kill()
                    p.join(5.0)

        await loop.run_in_executor(None, join_all)
        for w in self.workers:
            if w.process is not None:
                with contextlib.suppress(Exception):
                    loop.remove_reader(w.process.sentinel)
                log.info("worker %d (pid %d) exited with code %s", w.index, w.process.pid, w.process.exitcode)
            if w.conn is not None:
                w.conn.close()
        self._done.set()

    def exit_codes(self) -> list[int | None]:
        return [w.process.exitcode if w.process is not None else None for w in self.workers]


def _receive(conn: Any, proc: Any, timeout: float) -> Any:
    """The first message of a starting worker, or why there is none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.poll(0.2):
            try:
                message = conn.recv()
            except EOFError:
                return f"it exited (code {proc.exitcode})"
            if isinstance(message, tuple) and message[:1] == ("error",):
                return message[1]
            return message
        if not proc.is_alive():
            return f"it exited (code {proc.exitcode}) before serving"
    return f"not serving within {timeout:g} s"


def new_run_dir() -> str:
    """A private directory (0700) for the workers' sockets."""
    return tempfile.mkdtemp(prefix="openenv-workers-")


def remove_run_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


async def serve_metrics(run_dir: str, count: int, host: str, port: int) -> asyncio.AbstractServer:
    """``GET /metrics`` on ``host:port`` (the supervisor's ``--metrics-port``): every worker's
    metrics, merged as on the workers' own ``/metrics``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            line = head.split(b"\r\n", 1)[0].split()
            if len(line) >= 2 and line[0] in (b"GET", b"HEAD") and line[1].split(b"?")[0] == b"/metrics":
                paths = [os.path.join(run_dir, f"{i}.sock") for i in range(count)]
                texts = await asyncio.gather(*(ask_worker(p, b"metrics") for p in paths))
                body, status = merge_expositions(list(texts)), b"200 OK"
                ctype = b"text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + ctype
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + (body if line[:1] != [b"HEAD"] else b"")
            )
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, reuse_address=True)
