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
* Tokens across workers: a worker issues resume and join tokens that begin with its index
  (``w1.``, opaque to clients: :attr:`SessionManager.token_prefix
  <openenv.runtime.SessionManager.token_prefix>`). A handshake that resumes or joins with a
  sibling's token, on whichever connection and transport it arrives, is relayed
  (:meth:`WorkerPeers.relay`) to that sibling over the same private socket, where the
  sibling's own engine serves it as one more stream; the stream's other sessions, and every
  session whose token names its own worker, never touch the relay. A sibling that does not
  answer (it died; its sessions are lost) leaves the handshake to the local engine, which
  answers as for any unknown token.
* Session ids across workers: the ids of sessions a worker's HTTP side names on later requests
  (``openenv/session/create``'s, which ``/ws?session_id=`` and ``POST /mcp``'s
  ``params.session_id`` name; MCP Streamable HTTP's ``Mcp-Session-Id``) begin with its index
  too. A request or WebSocket naming a sibling's id is relayed whole (:meth:`WorkerPeers.
  relay_asgi`: its ASGI scope and messages, each way) to that sibling's HTTP application over
  the same private socket; requests naming no sibling's id never touch the relay.

Where the OS does not balance connections over ``SO_REUSEPORT`` listeners (it does on Linux;
macOS and Windows do not), the fallback is one worker, with a warning: run a fleet of servers
there (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from openenv.errors import ErrorCode
from openenv.observability.metrics import merge_expositions
from openenv.runtime.granularity import Undecodable
from openenv.runtime.load import sum_loads
from openenv.runtime.session import CLIENT
from openenv.v1 import environment_pb2, load_pb2

log = logging.getLogger("openenv.workers")

__all__ = [
    "HANG_TIMEOUT_S",
    "HEARTBEAT_S",
    "PEER_TIMEOUT_S",
    "PortReservation",
    "Supervisor",
    "WorkerConfig",
    "WorkerFactory",
    "WorkerPeers",
    "reuseport_balances",
    "token_worker",
]

PEER_TIMEOUT_S = 5.0
"""How long a worker waits for a sibling's answer (a hang guard: siblings answer from memory)."""

HEARTBEAT_S = 1.0
"""How often the supervisor asks each worker's event loop to answer (over its private socket)."""
HANG_TIMEOUT_S = 10.0
"""A worker whose event loop has not answered a heartbeat for this long, while its loop's thread
used (almost) no CPU, is hung (an environment that blocks the loop on a sleep, a lock or I/O; a
stopped process): the supervisor kills it, which takes its listening sockets out of the ports'
``SO_REUSEPORT`` groups (no new connection reaches it), and starts a new one in its place. Its
sessions are lost, as when a worker dies. A loop that is late because it is *working* (a
connect burst of thousands of sessions, whose loop iterations take seconds, more so on a
machine whose cores are shared) is not hung: its thread keeps using CPU. It is killed only past
:data:`BUSY_HANG_FACTOR` times the timeout (an environment that spins on the loop forever)."""
BUSY_HANG_FACTOR = 6
"""How many hang timeouts a worker whose loop thread keeps using CPU may go unanswered."""
_IDLE_CPU_SHARE = 0.02  # under this share of a core since its last answer, a silent loop is not working
_HEARTBEAT_TIMEOUT_S = 2.0
_STATE = "supervisor.json"  # in the run dir: the supervisor's view of its workers (up, hangs)

_READY_TIMEOUT_S = 120.0  # a worker imports the environment and binds: slow machines, big envs
_MAX_BACKOFF_S = 10.0


def _loop_cpu_s(pid: int) -> float:
    """The CPU time of process ``pid``'s main thread (its event loop's), in seconds; 0.0 when
    it cannot be read (not Linux, the process gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def token_worker(token: str) -> int | None:
    """The index of the worker that issued ``token`` (a resume or join token that begins with
    ``w<index>.``), or None for a token without that prefix (a server of one process's)."""
    if token[:1] != "w":
        return None
    head, dot, _ = token.partition(".")
    digits = head[1:]
    if not dot or not digits.isdecimal() or not digits.isascii() or len(digits) > 6:
        return None
    return int(digits)


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
    hang_timeout_s: float = HANG_TIMEOUT_S  # see HANG_TIMEOUT_S


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
        #: The engine's ``serve`` (:meth:`openenv.engine.Engine.serve`): streams relayed by
        #: siblings are served with it (:meth:`relay`); None: this worker takes none.
        self.serve: Callable[[Any], Awaitable[None]] | None = None
        self.relayed_total = 0  # handshakes this worker relayed to a sibling (logs, tests)
        #: The worker's HTTP application (the bridge's, behind the bearer-token guard): the
        #: requests siblings relay are served with it (:meth:`relay_asgi`); None: none taken.
        self.asgi: Callable[[dict[str, Any], Any, Any], Awaitable[None]] | None = None
        self.relayed_http_total = 0  # HTTP requests and WebSockets relayed to a sibling

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
            if what.startswith(b"session") and self.serve is not None:
                await self._serve_relayed(reader, writer, what[len(b"session") :].strip().decode(errors="replace"))
            elif what == b"asgi" and self.asgi is not None:
                await self._serve_asgi(reader, writer)
            elif what == b"ping":  # the supervisor's heartbeat: this worker's loop runs
                writer.write(b"pong")
            elif what == b"load":
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
        """A sibling's answer to ``what`` (``load``, ``metrics``), or None when it does not answer
        (or the supervisor found its loop hung: then it is not asked, and the caller does not wait)."""
        if index in self.supervised()["down"]:
            return None
        return await ask_worker(self.path(index), what)

    def supervised(self) -> dict[str, Any]:
        """The supervisor's view of the workers: ``down`` (the indexes of workers whose loop
        does not answer its heartbeat, or that are restarting) and ``hangs`` (per worker, how
        many times it was found hung and replaced)."""
        return read_state(self.run_dir, self.count)

    def sibling_of(self, token: str) -> int | None:
        """The index of the sibling that issued ``token``, or None when it is this worker's (or
        no worker's: it is then unknown here, as to a server of one process)."""
        index = token_worker(token)
        if index is None or index == self.index or index >= self.count:
            return None
        return index

    async def relay(self, stream: Any, hello: environment_pb2.SessionRequest, index: int) -> bool:
        """Serve ``stream`` (an engine :class:`~openenv.engine.Stream` whose first request,
        ``hello``, is a handshake with worker ``index``'s resume or join token) by relaying it
        to that worker, whose engine serves it as a stream of its own: every request the
        client sends goes there, every answer and the stream's end (a status, or the end
        of the answers) come back, in order and as they come (pipelining, half-close and
        flow control as on a direct stream). True once the stream is over; False, having
        sent the client nothing, when the worker does not take the stream within
        :data:`PEER_TIMEOUT_S` (it died: the caller answers the handshake itself, as for an
        unknown token). A worker that dies later ends the stream with UNAVAILABLE, as a
        direct stream to a worker that dies ends. Cancelling the caller (the client went
        away) ends the relayed stream as such (a resumable session is parked)."""
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(PEER_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(self.path(index))
                peer = stream.peer().replace("\n", "").encode()
                writer.write(b"session " + peer + b"\n" + _frame(_REQUEST, hello.SerializeToString()))
                await writer.drain()
                taken = await reader.readexactly(1) == _TAKEN
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            taken = False
        if not taken:
            if writer is not None:
                writer.transport.abort()
            log.warning("worker %d does not answer: a handshake with its token is answered here", index)
            return False
        assert writer is not None
        self.relayed_total += 1
        log.info("worker %d: a handshake with worker %d's token is relayed to it", self.index, index)
        pump = asyncio.ensure_future(_pump(stream, writer))

        def _abort_on_failure(p: asyncio.Future[None]) -> None:
            if not p.cancelled() and p.exception() is not None:
                writer.transport.abort()

        pump.add_done_callback(_abort_on_failure)
        ok = False
        try:
            while True:
                try:
                    kind, payload = await _read_frame(reader)
                except (OSError, asyncio.IncompleteReadError):
                    if pump.done() and not pump.cancelled() and (failed := pump.exception()) is not None:
                        raise failed from None  # the client's transport failed: as on a direct stream
                    await stream.abort(
                        ErrorCode.UNAVAILABLE,
                        f"worker {index}, which held this session, stopped: its sessions are lost",
                    )
                if kind == _ANSWER:
                    await stream.write(environment_pb2.SessionResponse.FromString(payload))
                elif kind == _STATUS:
                    (code,) = struct.unpack_from(">I", payload)
                    await stream.abort(ErrorCode(code), payload[4:].decode(errors="replace"))
                else:  # _OVER: the stream ended without a status
                    ok = True
                    return True
        finally:
            pump.cancel()
            if ok:
                writer.close()
            else:  # at once: the sibling reads the client gone (or the stream over) now
                writer.transport.abort()

    async def _serve_relayed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        """Serve a stream a sibling relays (:meth:`relay`) with this worker's engine."""
        assert self.serve is not None
        writer.write(_TAKEN)
        stream = _RelayedStream(reader, writer, peer)
        task = asyncio.current_task()
        assert task is not None
        pump = asyncio.ensure_future(stream.pump(task))
        try:
            await self.serve(stream)
            stream.over = True
            writer.write(_frame(_OVER, b""))
            await writer.drain()
        except _Ended:  # the status is sent (a server-side end cancelled the task first: done with)
            if task.cancelling():
                task.uncancel()
        except asyncio.CancelledError:
            if not stream.gone:
                raise  # this worker is stopping
            if task.cancelling():
                task.uncancel()
        finally:
            pump.cancel()

    async def relay_asgi(self, index: int, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Serve an HTTP request or WebSocket (``scope``, ``receive``, ``send``: ASGI) that names
        a session of worker ``index`` by relaying it to that worker's HTTP application
        (:attr:`asgi`): the scope (the client's address included) goes there, and the
        messages each way as they come (a streamed response, an SSE stream, a WebSocket's
        frames), until its application returns. The bearer token was checked here; the
        sibling trusts the private socket. True once served; False, having sent nothing,
        when the sibling does not take it within :data:`PEER_TIMEOUT_S` (it died: the caller
        answers it itself, as for an unknown id). A sibling that dies later ends it: a 502
        if no response started, else the connection (a WebSocket closes with 1011)."""
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(PEER_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(self.path(index))
                head = {k: scope[k] for k in _SCOPE_KEYS if k in scope}
                if "websocket.http.response" in (scope.get("extensions") or {}):
                    head["extensions"] = {"websocket.http.response": {}}
                writer.write(b"asgi\n" + _frame(_SCOPE, _dumps(head)))
                await writer.drain()
                taken = await reader.readexactly(1) == _TAKEN
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            taken = False
        if not taken:
            if writer is not None:
                writer.transport.abort()
            log.warning("worker %d does not answer: a request for its session is answered here", index)
            return False
        assert writer is not None
        self.relayed_http_total += 1
        log.info("worker %d: a request for worker %d's session is relayed to it", self.index, index)
        pump = asyncio.ensure_future(_pump_asgi(receive, writer))
        started = False  # a response started, or the WebSocket was accepted or refused
        try:
            while True:
                try:
                    kind, payload = await _read_frame(reader)
                except (OSError, asyncio.IncompleteReadError, struct.error):
                    await _sibling_gone(scope, send, started, index)
                    return True
                if kind == _OVER:
                    return True
                try:
                    msg = _loads(payload)
                except ValueError:
                    await _sibling_gone(scope, send, started, index)
                    return True
                if msg.get("type") in _STARTS:
                    started = True
                await send(msg)
        finally:
            pump.cancel()
            writer.transport.abort()  # the sibling reads the client gone (or is done) now

    async def _serve_asgi(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve a request or WebSocket a sibling relays (:meth:`relay_asgi`) with :attr:`asgi`."""
        assert self.asgi is not None
        kind, payload = await asyncio.wait_for(_read_frame(reader), PEER_TIMEOUT_S)
        if kind != _SCOPE:
            return
        try:
            scope = _loads(payload)
        except ValueError:
            log.warning("a sibling relayed a request that is not an ASGI scope: dropped")
            return
        client = scope.get("client")
        CLIENT.set(str(client[0]) if client else "")  # sessions counted per client, as at the guard
        writer.write(_TAKEN)
        gone_msg = (
            {"type": "http.disconnect"} if scope["type"] == "http" else {"type": "websocket.disconnect", "code": 1006}
        )
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(_RELAY_INBOX)
        closed = False

        async def pump() -> None:
            try:
                while True:
                    k, data = await _read_frame(reader)
                    if k == _MESSAGE:
                        await inbox.put(_loads(data))
            except (OSError, asyncio.IncompleteReadError, struct.error, ValueError, EOFError):
                pass
            await inbox.put(gone_msg)  # the forwarder closed: its client is gone (or done)

        async def receive() -> dict[str, Any]:
            msg = await inbox.get()
            if msg is gone_msg:
                inbox.put_nowait(msg)  # and on every later receive
            return msg

        async def send(msg: dict[str, Any]) -> None:
            nonlocal closed
            if closed:
                return
            writer.write(_frame(_MESSAGE, _dumps(msg)))
            try:
                await writer.drain()
            except OSError:
                closed = True

        reading = asyncio.ensure_future(pump())
        try:
            await self.asgi(scope, receive, send)
            if not closed:
                writer.write(_frame(_OVER, b""))
        except Exception:
            log.exception("a request relayed by a sibling failed")
        finally:
            reading.cancel()

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
        """The whole server's metrics: every worker's summed, plus ``openenv_worker_*`` per worker
        (``openenv_worker_hangs_total``: how many times the supervisor replaced it, hung)."""
        texts: list[bytes | None] = list(
            await asyncio.gather(
                *(self.ask(i, b"metrics") for i in range(self.count) if i != self.index),
            )
        )
        texts.insert(self.index, self._local_metrics() if self._local_metrics is not None else None)
        return merge_expositions(texts, hangs=self.supervised()["hangs"])

    async def health(self) -> tuple[int, int]:
        """(Workers that answered, workers)."""
        others = await asyncio.gather(*(self.ask(i, b"load") for i in range(self.count) if i != self.index))
        return 1 + sum(1 for o in others if o is not None), self.count


# The relay's frames (WorkerPeers.relay): a kind byte, a 4-byte big-endian length, the payload.
_TAKEN = b"T"  # the sibling took the stream (one byte, no frame): it is alive
_REQUEST = 0x51  # forwarder -> owner: a SessionRequest
_UNDECODABLE = 0x55  # forwarder -> owner: request id (8 bytes), too_fine (1), the error's text
_END = 0x45  # forwarder -> owner: the client's input ended (half-close, a closed WebSocket)
_ANSWER = 0x41  # owner -> forwarder: a SessionResponse
_STATUS = 0x58  # owner -> forwarder: the stream ended with a status: code (4 bytes), message
_OVER = 0x5A  # owner -> forwarder: the stream ended without one
_SCOPE = 0x53  # forwarder -> owner (after "asgi"): an HTTP request's or WebSocket's ASGI scope
_MESSAGE = 0x4D  # either way: an ASGI message (MessagePack: maps of str, bytes, numbers, lists)
_RELAY_INBOX = 16  # requests a relayed stream holds that its engine has not read yet
# Either side closing the connection without its last frame: the other is gone.


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    kind, size = struct.unpack(">BI", await reader.readexactly(5))
    return kind, (await reader.readexactly(size) if size else b"")


async def _pump(stream: Any, writer: asyncio.StreamWriter) -> None:
    """The forwarder's side: the client's requests, as the transport reads them, to the owner."""
    while True:
        item = await stream.read()  # a transport's failure propagates (relay re-raises it)
        if item is None:
            data = _frame(_END, b"")
        elif isinstance(item, Undecodable):
            detail = struct.pack(">QB", item.request_id, item.too_fine) + item.error.encode()
            data = _frame(_UNDECODABLE, detail)
        else:  # a SessionRequest (the transports that carry tokens prepare none)
            data = _frame(_REQUEST, getattr(item, "request", item).SerializeToString())
        try:
            writer.write(data)
            await writer.drain()
        except OSError:
            return  # the owner is gone: relay tells the client
        if item is None:
            return


_SCOPE_KEYS = (
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "path",
    "raw_path",
    "query_string",
    "root_path",
    "headers",
    "client",
    "server",
    "subprotocols",
)
_STARTS = frozenset(("http.response.start", "websocket.accept", "websocket.close", "websocket.http.response.start"))


def _dumps(msg: Any) -> bytes:
    """An ASGI message (or scope) as bytes: MessagePack (what it cannot hold made plain: an
    application may send a ``bytearray`` or ``memoryview`` body, a set). MessagePack, not
    marshal (which this socket used before): a data format whose reader builds only data
    (no code objects, no interpreter-version-specific input that can crash it), with the
    maps, strings, byte strings and numbers ASGI messages are made of; tuples come back as
    lists, which ASGI accepts wherever it takes a tuple."""
    data: bytes = _msgpack().packb(msg, use_bin_type=True, default=_plain)
    return data


def _loads(data: bytes) -> Any:
    """What :func:`_dumps` wrote; ValueError for anything that is not a map of it."""
    try:
        msg = _msgpack().unpackb(data, raw=False, strict_map_key=True)
    except Exception as e:  # noqa: BLE001 (msgpack raises several types for bad input)
        raise ValueError(f"not an ASGI message: {e}") from None
    if not isinstance(msg, dict):
        raise ValueError("not an ASGI message: not a map")
    return msg


def _plain(v: Any) -> Any:
    """What MessagePack cannot hold, as what it can (its ``default`` hook)."""
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, (set, frozenset)):
        return list(v)
    return str(v)


_MSGPACK: Any = None


def _msgpack() -> Any:
    global _MSGPACK
    if _MSGPACK is None:  # imported on first use: only the HTTP side relays (the http extra has it)
        import msgpack

        _MSGPACK = msgpack
    return _MSGPACK


async def _pump_asgi(receive: Any, writer: asyncio.StreamWriter) -> None:
    """The forwarder's side of a relayed request: the client's ASGI messages, to the owner."""
    while True:
        msg = await receive()
        try:
            writer.write(_frame(_MESSAGE, _dumps(msg)))
            await writer.drain()
        except OSError:
            return  # the owner is gone: relay_asgi answers the client
        if msg.get("type", "").endswith(".disconnect"):
            return


async def _sibling_gone(scope: dict[str, Any], send: Any, started: bool, index: int) -> None:
    """A relayed request's sibling died before its application returned."""
    why = f"worker {index}, which held this session, stopped: its sessions are lost"
    with contextlib.suppress(Exception):  # the client may be gone too
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1011, "reason": why[:120]})
        elif not started:
            body = b'{"detail":"' + why.encode() + b'"}'
            await send(
                {"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})


class _Ended(Exception):
    """A relayed stream was ended with a status (sent to the forwarder)."""


class _RelayedStream:
    """The owner's side: a stream a sibling relays, as the engine's :class:`~openenv.engine.Stream`."""

    relayed = True  # the engine never relays it again
    encode_result = None  # the engine encodes results as protobuf

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        self._reader, self._writer, self._peer = reader, writer, peer
        # Bounded: a client that sends faster than its session answers fills the relay's socket,
        # then the forwarder stops reading it, and its transport's flow control holds the client.
        self._inbox: asyncio.Queue[Any] = asyncio.Queue(_RELAY_INBOX)
        self.gone = False  # the forwarder (its client) went away
        self.over = False  # the stream ended: the forwarder may close

    async def pump(self, task: asyncio.Task[Any]) -> None:
        try:
            while True:
                kind, payload = await _read_frame(self._reader)
                if kind == _REQUEST:
                    try:
                        item: Any = environment_pb2.SessionRequest.FromString(payload)
                    except Exception as e:  # noqa: BLE001 (the forwarder parsed it: never, but answered in band)
                        item = Undecodable(str(e))
                elif kind == _UNDECODABLE:
                    rid, too_fine = struct.unpack_from(">QB", payload)
                    item = Undecodable(payload[9:].decode(errors="replace"), rid, too_fine=bool(too_fine))
                else:  # _END
                    item = None
                await self._inbox.put(item)
        except (OSError, asyncio.IncompleteReadError, struct.error):
            pass
        # The forwarder closed: its client went away (or the stream is over). To the engine a
        # client that went away is a cancelled stream, as on gRPC: a resumable session is parked.
        if not self.over:
            self.gone = True
            task.cancel()

    async def read(self) -> Any:
        return await self._inbox.get()

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        if self.gone:
            raise asyncio.CancelledError
        self._writer.write(_frame(_ANSWER, response.SerializeToString()))
        try:
            await self._writer.drain()
        except OSError:
            self.gone = True
            raise asyncio.CancelledError from None

    async def abort(self, code: ErrorCode, message: str) -> Any:
        self.over = True
        self._writer.write(_frame(_STATUS, struct.pack(">I", int(code)) + message.encode()))
        with contextlib.suppress(OSError):
            await self._writer.drain()
        raise _Ended(message)

    def peer(self) -> str:
        return self._peer

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ()  # the forwarder checked the bearer token; the engine reads no metadata


def _worker_load(index: int, data: bytes | None) -> load_pb2.WorkerLoad:
    if data is None:
        return load_pb2.WorkerLoad(index=index, up=False)
    w = load_pb2.WorkerLoad()
    try:
        w.ParseFromString(data)
    except Exception:  # noqa: BLE001 (a sibling cut off mid-answer: it died)
        return load_pb2.WorkerLoad(index=index, up=False)
    return w


def read_state(run_dir: str, count: int) -> dict[str, Any]:
    """The supervisor's view of its workers (:meth:`WorkerPeers.supervised`); none yet: all up."""
    try:
        with open(os.path.join(run_dir, _STATE), encoding="utf-8") as f:
            state = json.load(f)
        down = {int(i) for i in state["down"] if isinstance(i, int)}
        hangs = [int(h) for h in state["hangs"]][:count]
    except (OSError, ValueError, KeyError, TypeError):
        return {"down": set(), "hangs": [0] * count}
    return {"down": down, "hangs": hangs + [0] * (count - len(hangs))}


async def ask_worker(path: str, what: bytes, timeout: float = PEER_TIMEOUT_S) -> bytes | None:
    """The answer of the worker at ``path`` to ``what``, or None when it does not answer
    within ``timeout``."""

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
        data = await asyncio.wait_for(exchange(), timeout)
    except (OSError, TimeoutError):
        return None
    return data or None


# ---------------------------------------------------------------------------- the supervisor


class _Worker:
    __slots__ = ("conn", "hangs", "index", "process", "restarts", "started", "up")

    def __init__(self, index: int) -> None:
        self.index = index
        self.restarts = 0
        self.hangs = 0  # times it was found hung and replaced
        self.up = False  # serving and answering the heartbeat
        self.process: Any = None
        self.conn: Any = None
        self.started = 0.0


class Supervisor:
    """Runs ``config.count`` workers (``target(config, index, restarts, conn)`` in a spawned
    process each); restarts a worker that dies, and one whose event loop stops answering its
    heartbeat for ``config.hang_timeout_s`` (:data:`HANG_TIMEOUT_S`: killed, then restarted);
    drains them all on :meth:`stop`. Its view of the workers (which are down, how many times
    each was found hung) is in the run dir, where the workers' ``/health``, ``GetLoad`` and
    ``/metrics`` read it (:meth:`WorkerPeers.supervised`).

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
        w.up = True
        self._write_state()
        task = asyncio.ensure_future(self._watch(w, proc))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, w: _Worker, proc: Any) -> None:
        """The heartbeat of one worker process: ask its loop to answer every :data:`HEARTBEAT_S`;
        one that has not answered for ``hang_timeout_s`` is killed (then restarted by
        :meth:`_exited`, as a worker that died)."""
        path = os.path.join(self.config.run_dir, f"{w.index}.sock")
        limit = self.config.hang_timeout_s
        answered = time.monotonic()
        worked = _loop_cpu_s(proc.pid)  # the loop thread's CPU time at the last answer
        while not self._stopping and proc is w.process and proc.is_alive():
            asked = time.monotonic()
            ok = await ask_worker(path, b"ping", min(_HEARTBEAT_TIMEOUT_S, limit)) == b"pong"
            if self._stopping or proc is not w.process:
                return
            now = time.monotonic()
            if ok:
                answered = now
                worked = _loop_cpu_s(proc.pid)
                if not w.up:
                    log.warning("worker %d (pid %d) answers again", w.index, proc.pid)
                    w.up = True
                    self._write_state()
            else:
                if w.up:  # siblings stop asking it (their /health and GetLoad do not wait on it)
                    w.up = False
                    self._write_state()
                silent = now - answered
                # Busy, not hung: a loop late because it works (a burst; shared cores) keeps its
                # thread on the CPU, and answers once its iteration ends.
                busy = _loop_cpu_s(proc.pid) - worked >= _IDLE_CPU_SHARE * silent
                if silent >= limit * (BUSY_HANG_FACTOR if busy else 1):
                    w.hangs += 1
                    log.error(
                        "worker %d (pid %d) has not answered for %.1f s: its event loop is %s; killing it "
                        "(its sessions are lost) and starting a new one",
                        w.index,
                        proc.pid,
                        silent,
                        "busy without end" if busy else "blocked or the process is stopped",
                    )
                    self._write_state()
                    with contextlib.suppress(ProcessLookupError, OSError):
                        os.kill(proc.pid, signal.SIGKILL)  # SIGTERM would wait for the loop it lacks
                    return
            await asyncio.sleep(max(0.0, HEARTBEAT_S - (time.monotonic() - asked)))

    def _write_state(self) -> None:
        """The supervisor's view of its workers, for the workers to read (atomically replaced)."""
        state = {"down": [w.index for w in self.workers if not w.up], "hangs": [w.hangs for w in self.workers]}
        path = os.path.join(self.config.run_dir, _STATE)
        with contextlib.suppress(OSError):
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(state, f)
            os.replace(path + ".tmp", path)

    def hangs(self) -> list[int]:
        """Per worker, how many times it was found hung and replaced."""
        return [w.hangs for w in self.workers]

    def _exited(self, w: _Worker, proc: Any) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            loop.remove_reader(proc.sentinel)
        if proc is not w.process or self._stopping:
            return
        w.up = False
        self._write_state()
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


async def _none() -> None:
    return None


async def serve_metrics(run_dir: str, count: int, host: str, port: int) -> asyncio.AbstractServer:
    """``GET /metrics`` on ``host:port`` (the supervisor's ``--metrics-port``): every worker's
    metrics, merged as on the workers' own ``/metrics``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            line = head.split(b"\r\n", 1)[0].split()
            if len(line) >= 2 and line[0] in (b"GET", b"HEAD") and line[1].split(b"?")[0] == b"/metrics":
                paths = [os.path.join(run_dir, f"{i}.sock") for i in range(count)]
                state = read_state(run_dir, count)
                texts = await asyncio.gather(
                    *(_none() if i in state["down"] else ask_worker(p, b"metrics") for i, p in enumerate(paths))
                )
                body, status = merge_expositions(list(texts), hangs=state["hangs"]), b"200 OK"
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
