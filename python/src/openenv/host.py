"""The host of an environment: its listeners (gRPC, HTTP, or both) over one set of sessions.

:class:`Host` is what ``openenv serve`` and :func:`serve` run: a
:class:`~openenv.runtime.SessionManager` (capacity, idle reaping, drain) shared by the gRPC
listener (:class:`openenv.server.Server`) and the HTTP side (OpenEnv's ``/ws``, ``/mcp``,
``/health``...; :mod:`openenv.http`, the ``http`` extra), so a session is a session whichever
door it came in by. The API and the CLI have the same defaults (:func:`default_http_port`).

:func:`serve_bridge` is ``openenv bridge``: the HTTP side in front of a remote gRPC server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, Unpack

import openenv.engine as _engine_module  # looked up when a host is built (the certifier's mutants replace it)
from openenv.engine import Engine
from openenv.grpc_libraries import server_class
from openenv.observability import Observer
from openenv.observability.grpc import ObservingInterceptor, env_clock
from openenv.observability.logs import configure_logging
from openenv.runtime.environment import Environment
from openenv.runtime.load import server_load
from openenv.runtime.session import EnvironmentRuntime, SessionManager
from openenv.security import SecuritySettings, TokenSet, check_bind
from openenv.server import Server
from openenv.settings import HostKeywords, ServerSettings, legacy_keywords, worker_count
from openenv.workers import (
    PortReservation,
    Supervisor,
    WorkerConfig,
    WorkerFactory,
    WorkerPeers,
    new_run_dir,
    remove_run_dir,
    reuseport_balances,
    serve_metrics,
)

log = logging.getLogger("openenv.host")

__all__ = [
    "DEFAULT",
    "Host",
    "default_http_port",
    "http_available",
    "serve",
    "serve_async",
    "serve_bridge",
    "serve_bridge_async",
]

DEFAULT: Any = "default"
"""``http_port=DEFAULT``: the HTTP side on :func:`default_http_port` when the ``http`` extra
is installed, else gRPC only (with a log line saying so)."""

HTTP_EXTRA = "the HTTP side (OpenEnv's /ws, /mcp) needs the http extra: pip install 'protoenv[http]'"


def http_available() -> bool:
    """True when the ``http`` extra (uvicorn, websockets, mcp) is installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("uvicorn", "websockets", "mcp"))


def _http_side() -> Any:
    """:mod:`openenv.http` (the ``http`` extra), or an ImportError that names the extra."""
    try:
        import openenv.http as http_side
    except ImportError as e:
        raise ImportError(f"{HTTP_EXTRA} ({e})") from e
    return http_side


def _remote() -> Any:
    """:class:`openenv.bridge.RemoteBackend` (the ``http`` extra), or an ImportError naming the extra."""
    try:
        from openenv.bridge import RemoteBackend
    except ImportError as e:
        raise ImportError(f"{HTTP_EXTRA} ({e})") from e
    return RemoteBackend


def is_loopback(host: str) -> bool:
    """True for a loopback interface (where the playground is on by default)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def default_http_port(grpc_port: int | None) -> int:
    """The HTTP side's port when none is given: ``$PORT`` (Hugging Face Spaces set 7860),
    else 8000 (OpenEnv's), else 0 (a free port) when the gRPC port is 0 too."""
    env = os.environ.get("PORT")
    if env:
        return int(env)
    return 0 if grpc_port == 0 else 8000


def _host_settings(
    settings: ServerSettings | None, keywords: dict[str, Any]
) -> tuple[ServerSettings, SecuritySettings]:
    """(The host's settings, the HTTP listener's security) from ``Host``'s arguments: the
    deprecated keywords through :func:`~openenv.settings.legacy_keywords` (the one shim), and a
    legacy ``http_options``' tokens and TLS, when set, the HTTP listener's own (what they meant
    before settings)."""
    if not keywords:
        settings = settings if settings is not None else ServerSettings()
        return settings, settings.security
    opts = keywords.get("http_options")
    settings = legacy_keywords("Host", settings, keywords, stacklevel=4)
    if opts is None:
        return settings, settings.security
    security = settings.security
    return settings, security.replace(tokens=opts.tokens or security.tokens, tls=opts.tls or security.tls)


class Host:
    """The listeners of one environment over one :class:`SessionManager`.

    Args:
        factory: an :class:`Environment` subclass, or a callable returning an instance;
            called once per session with the handshake options as keyword arguments.
        host, port: the gRPC listener (port 0 picks a free port; ``None``: no gRPC).
        http_port: the HTTP side's port (0: a free port; ``None``: no HTTP side;
            :data:`DEFAULT`: :func:`default_http_port` when the ``http`` extra is installed).
        http_host: interface of the HTTP side (default: ``host``).
        metrics_port: also serve ``/metrics`` on this port (0: a free one; on ``http_host``). That
            port takes no token: beyond loopback it needs ``allow_anonymous`` (with tokens,
            scrape the HTTP side's ``/metrics`` with the token instead).
        binary_port: also serve the binary WebSocket transport (RFC 0011) on a listener of its
            own, ``ws(s)://http_host:binary_port/v1/session`` (0: a free port; ``None``, the
            default: not; :attr:`binary_url`), on picows (the ``http`` extra): the same
            transport, rules and sessions as ``/v1/session`` on the HTTP listener, at a fraction
            of its cost per message (docs/performance.md). It takes the server's tokens and TLS.
        settings: how it serves (:class:`~openenv.settings.ServerSettings`: limits, security,
            the HTTP side's transport, the gRPC library, reflection, metrics, the playground);
            default: all defaults.
        **keywords: deprecated, removed in 0.3 (a ``DeprecationWarning`` says so; give
            ``settings``): field names of ``settings`` and of the objects it holds
            (``max_sessions=``, ``tokens=``, ``isolation=``...), applied over ``settings``;
            ``engine=`` (``grpc_library``) and ``http_options=`` (an
            :class:`openenv.http.HttpOptions`: its transport fields become ``settings.http``,
            its tokens and TLS, when set, apply to the HTTP side only, as before); one route,
            :func:`openenv.settings.legacy_keywords`.
        worker_factory: with ``workers`` > 1, what each worker process makes its factory from
            (default ``factory`` itself, which must then pickle, e.g. a class importable by
            name); a :class:`openenv.workers.WorkerFactory` for one that does not.

    With ``workers=N`` (N > 1, or ``"auto"``: one per core; :class:`ServerSettings`), this host
    is the supervisor of N worker processes, each serving every listener on the same ports
    (``SO_REUSEPORT``; :mod:`openenv.workers`): :meth:`start` returns once all serve, a worker
    that dies is restarted, :meth:`stop` drains them all. Its :attr:`manager` and :attr:`engine`
    then serve nothing (the workers' do). A resume or join token names the worker holding its
    session or world, and whichever worker the new connection reaches relays that stream to it
    (RFC 0013, Tokens across workers).
    """

    def __init__(
        self,
        factory: Callable[..., Environment] | type[Environment],
        host: str = "127.0.0.1",
        port: int | None = 50051,
        *,
        http_port: int | None = None,
        http_host: str | None = None,
        metrics_port: int | None = None,
        binary_port: int | None = None,
        settings: ServerSettings | None = None,
        worker_factory: Any = None,
        **keywords: Unpack[HostKeywords],
    ) -> None:
        keywords = dict(keywords)  # type: ignore[assignment]
        if http_port is DEFAULT:
            if http_available():
                http_port = default_http_port(port)
            else:
                log.warning("%s; serving gRPC only", HTTP_EXTRA)
                http_port = None
        if port is None and http_port is None and binary_port is None:
            raise ValueError("nothing to serve: give a gRPC port, an HTTP port, a binary port or more")
        settings, http_security = _host_settings(settings, dict(keywords))
        #: How this host serves (what was given, the keywords applied).
        self.settings = settings
        #: Worker processes (1: this process serves; more: it supervises them).
        self.workers: int = worker_count(settings.workers)
        if self.workers > 1 and not reuseport_balances():
            log.warning(
                "%d workers need SO_REUSEPORT balancing (Linux); serving with one worker on %s",
                self.workers,
                sys.platform,
            )
            self.workers = 1
        self._factory = factory
        self._worker_factory = worker_factory
        self._supervisor: Supervisor | None = None
        self._ports = PortReservation()
        self._run_dir: str | None = None
        self._urls: dict[str, str | None] = {}
        self._worker: tuple[str, int, int, int] | None = None  # (run dir, index, count, restarts)
        self._peers: WorkerPeers | None = None
        self._supervisor_metrics: Any = None
        #: How long each worker drains its sessions when the supervisor stops (``serve``'s grace).
        self.grace_s = 10.0
        security = settings.security
        tokens, allow_anonymous = security.tokens, security.allow_anonymous
        if port is not None:
            check_bind(host, tokens, allow_anonymous, "the gRPC listener")
        if http_port is not None:
            check_bind(http_host or host, http_security.tokens, allow_anonymous, "the HTTP listener")
        if binary_port is not None:
            check_bind(http_host or host, tokens, allow_anonymous, "the binary listener")
        if metrics_port is not None:  # a scrapers' port of its own, without tokens (docs/security.md)
            check_bind(http_host or host, TokenSet(), allow_anonymous, "the metrics port (it takes no token)")
        self.runtime = EnvironmentRuntime(factory, limits=settings.limits)
        self.manager = SessionManager(self.runtime)
        self.host, self.port, self.http_port = host, port, http_port
        self.http_host, self.http_options = http_host, keywords.get("http_options")
        self.tokens, self.tls = tokens, security.tls
        self._http_security = http_security
        self.observer = Observer(settings.metrics, self.runtime.max_sessions)
        self.metrics_port = metrics_port
        self.metrics_url: str | None = None  # http://host:port/metrics with metrics_port
        self._metrics_server: Any = None
        self.web = is_loopback(http_host or host) if settings.web is None else settings.web
        #: The protocol engine every listener of this host serves (one pool of sessions). It
        #: writes every capability clients are told from ``settings``, whichever listeners run.
        #: (Looked up on the module when built: the certifier's mutants replace it.)
        self.engine: Engine = _engine_module.Engine(self.manager, settings)
        self.grpc: Server | None = (
            None
            if self.workers > 1
            else server_class(settings.grpc_library)(
                self.manager,
                host,
                port,
                engine=self.engine,
                settings=settings,
                interceptors=[ObservingInterceptor(self.observer, env_clock(self.manager))],
            )
            if port is not None and self.workers == 1
            else None
        )
        self.http: Any = None  # openenv.http.HttpServer once started
        self.binary_port = binary_port
        self.binary: Any = None  # openenv.http.binary_listener.BinaryListener once started
        self._http_side = _http_side() if http_port is not None else None
        self._stopped = asyncio.Event()

    @property
    def address(self) -> str | None:
        """``grpc://host:port`` of the gRPC listener, when it runs."""
        if self._supervisor is not None:
            return self._urls.get("grpc")
        return self.grpc.address if self.grpc is not None and self.grpc.port else None

    @property
    def http_url(self) -> str | None:
        """``http(s)://host:port`` of the HTTP side, when it runs."""
        if self._supervisor is not None:
            return self._urls.get("http")
        return self.http.url if self.http is not None else None

    @property
    def binary_url(self) -> str | None:
        """``ws(s)://host:port/v1/session`` of the binary transport's own listener, when it runs."""
        if self._supervisor is not None:
            return self._urls.get("binary")
        return self.binary.url if self.binary is not None else None

    def worker_pids(self) -> list[int | None]:
        """The process ids of the workers (with ``workers`` > 1; else this process's)."""
        return self._supervisor.pids() if self._supervisor is not None else [os.getpid()]

    def describe(self) -> list[str]:
        """One line per listener, e.g. ``serving Echo on grpc://127.0.0.1:50051``."""
        name = self.runtime.env_cls.__name__
        if self._supervisor is not None:
            name = f"{name} ({self.workers} workers)"
        lines = []
        if self.address:
            lines.append(f"serving {name} on {self.address}")
        if self.http_url:
            extra = (", /metrics" if self.observer.metrics is not None or self._supervisor else "") + (
                ", playground /web" if self.web else ""
            )
            lines.append(f"serving {name} on {self.http_url} (HTTP: WebSocket /ws, MCP /mcp, /health{extra})")
        if self.binary_url:
            lines.append(f"serving {name} on {self.binary_url} (binary protocol transport)")
        if self.metrics_url:
            lines.append(f"metrics of {name} on {self.metrics_url}")
        return lines

    async def start(self) -> Host:
        if self.workers > 1:
            return await self._start_workers()
        try:
            if self._worker is not None:  # one of several workers: share the ports, answer the siblings
                run_dir, index, count, restarts = self._worker
                m = self.observer.metrics
                self._peers = WorkerPeers(
                    run_dir, index, count, restarts, lambda: server_load(self.manager), m.render if m else None
                )
                self.manager.token_prefix = f"w{index}."  # tokens name their worker (workers.py)
                self._peers.serve = self.engine.serve  # siblings relay handshakes with its tokens here
                await self._peers.start()
                self.engine.workers = self._peers
                if m is not None:
                    self.observer.merged = self._peers.metrics
                if self.grpc is not None:
                    self.grpc.reuse_port = True
            if self.grpc is not None:
                await self.grpc.start()
            if self._http_side is not None:
                b = self._http_side
                # Both listeners bound messages alike, unless the HTTP settings say otherwise.
                http_settings = self.settings.replace(security=self._http_security)
                bridge = b.BridgeApp(
                    b.LocalBackend(self.manager, engine=self.engine),
                    max_message_bytes=http_settings.http_message_bytes(),
                    engine=self.engine,
                )
                if self._peers is not None:  # requests naming a sibling's session go to it, and back
                    bridge.peers, self._peers.asgi = self._peers, bridge
                app = b.ObservedApp(bridge, self.observer, web=self.web)
                # One token check for every listener: the engine's, unless a legacy http_options
                # gave the HTTP side tokens of its own.
                shared = self._http_security.tokens == self.settings.security.tokens
                http = b.HttpServer(
                    app,
                    self.http_host or self.host,
                    self.http_port,
                    settings=http_settings,
                    authenticator=self.engine.authenticator if shared else None,
                )
                http.reuse_port = self._worker is not None
                self.http = await http.start()
                log.info("serving %s over HTTP on %s", self.runtime.env_cls.__name__, self.http.url)
            if self.binary_port is not None:
                await self._serve_binary(self.binary_port)
            if self.metrics_port is not None:
                self._serve_metrics(self.metrics_port)
        except BaseException:
            await self.stop(0.0)
            raise
        self.manager.start_reaper()
        return self

    async def _serve_binary(self, port: int) -> None:
        try:
            from openenv.http.binary_listener import BinaryListener
        except ImportError as e:
            why = "the binary listener needs picows, in the http extra: pip install 'protoenv[http]'"
            raise ImportError(f"{why} ({e})") from e
        s = self.settings
        self.binary = await BinaryListener(
            self.engine,
            self.http_host or self.host,
            port,
            security=s.security,
            http=s.http,
            max_message_bytes=s.http_message_bytes(),
            reuse_port=self._worker is not None,
        ).start()
        log.info("serving %s over the binary transport on %s", self.runtime.env_cls.__name__, self.binary.url)

    async def _start_workers(self) -> Host:
        """Reserve the ports, start the workers, return once every one serves."""
        listen = self.http_host or self.host
        try:
            port = self._ports.reserve(self.host, self.port, "the gRPC listener")
            http_port = self._ports.reserve(listen, self.http_port, "the HTTP listener")
            binary_port = self._ports.reserve(listen, self.binary_port, "the binary listener")
            self._run_dir = new_run_dir()
            factory = self._worker_factory if self._worker_factory is not None else self._factory
            config = WorkerConfig(
                factory=factory,
                host=self.host,
                port=port,
                http_port=http_port,
                http_host=self.http_host,
                binary_port=binary_port,
                settings=self.settings.replace(workers=1),
                grace_s=self.grace_s,
                run_dir=self._run_dir,
                count=self.workers,
                log_level=logging.getLogger().getEffectiveLevel(),
                keywords={"http_options": self.http_options} if self.http_options is not None else {},
            )
            _check_picklable(config)
            self._supervisor = Supervisor(_worker_main, config)
            await self._supervisor.start()
            self._urls = self._supervisor.urls
            if self.metrics_port is not None:
                self._supervisor_metrics = await serve_metrics(self._run_dir, self.workers, listen, self.metrics_port)
                bound = self._supervisor_metrics.sockets[0].getsockname()[1]
                shown = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
                self.metrics_url = f"http://{shown}:{bound}/metrics"
        except BaseException:
            await self.stop(0.0)
            raise
        return self

    def _serve_metrics(self, port: int) -> None:
        m = self.observer.metrics
        if m is None:
            raise RuntimeError("--metrics-port needs prometheus-client: pip install 'protoenv[http]'")
        mhost = self.http_host or self.host
        self._metrics_server = m.serve(port, mhost)
        bound = self._metrics_server.server_address[1]
        self.metrics_url = f"http://{'127.0.0.1' if mhost in ('0.0.0.0', '::', '') else mhost}:{bound}/metrics"
        log.info("metrics on %s", self.metrics_url)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain: NOT_SERVING, refuse new sessions, let requests in progress finish (up to
        ``grace_s``), end every session; then close the listeners. Idempotent."""
        if self._stopped.is_set():
            return
        if self.workers > 1:
            if self._supervisor is not None:
                await self._supervisor.stop(grace_s)
            if self._supervisor_metrics is not None:
                self._supervisor_metrics.close()
                self._supervisor_metrics = None
            self._ports.close()
            if self._run_dir is not None:
                remove_run_dir(self._run_dir)
            self._stopped.set()
            return
        if self.grpc is not None and self.grpc.port:
            await self.grpc.set_serving(False)
        await self.manager.drain(grace_s)
        if self.http is not None:
            await self.http.stop()
            self.http = None
        if self.binary is not None:
            await self.binary.stop()
            self.binary = None
        if self.grpc is not None:
            await self.grpc.stop(grace_s)
        await self.manager.shutdown()
        if self._peers is not None:
            await self._peers.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        self._stopped.set()

    async def wait(self) -> None:
        """Until the listeners stop."""
        if self.grpc is not None and self.grpc.port and self._worker is None:
            await self.grpc.wait()
        else:
            await self._stopped.wait()

    async def __aenter__(self) -> Host:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop(1.0)


async def _until_signalled(waiter: Any, then: Callable[[], Any]) -> None:
    """Until SIGTERM/SIGINT (or ``waiter`` finishes), then ``await then()``; the waiting
    tasks are cancelled only after that (cancelling grpc.aio's ``wait_for_termination``
    while the server is still up would cancel its shutdown)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    _watch_parent(loop, stop)
    tasks = {asyncio.ensure_future(waiter), asyncio.ensure_future(stop.wait())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        await then()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


PARENT_FD_ENV = "OPENENV_PARENT_FD"
"""Names an inherited pipe's read end: the server drains and exits, as on SIGTERM, when the
pipe's other end closes, i.e. when the process that started it is gone, however it ended.
``openenv certify`` sets it, so a certifier killed with SIGKILL leaves no server behind (a
parent-death signal would not do: Linux sends it when the *thread* that forked exits)."""


def _watch_parent(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    raw = os.environ.pop(PARENT_FD_ENV, "")  # popped: not a promise to the server's own children
    if not raw:
        return
    try:
        fd = int(raw)
        os.set_blocking(fd, False)
    except (ValueError, OSError) as e:
        log.warning("ignoring $%s=%r: %s", PARENT_FD_ENV, raw, e)
        return

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # EOF: every write end is closed, so the parent is gone
            loop.remove_reader(fd)
            os.close(fd)
            log.warning("the parent process is gone ($%s closed): shutting down", PARENT_FD_ENV)
            stop.set()

    loop.add_reader(fd, readable)


def _check_picklable(config: WorkerConfig) -> None:
    import pickle

    try:
        pickle.dumps(config)
    except Exception as e:  # noqa: BLE001 (pickling raises anything: every failure is this refusal)
        raise ValueError(
            f"workers > 1 start each worker from a copy of the factory and settings, and these do not "
            f"pickle ({type(e).__name__}: {e}): serve a class importable by name (module:Class), or give "
            "worker_factory=openenv.workers.WorkerFactory(load, target)"
        ) from None


def _worker_main(config: WorkerConfig, index: int, restarts: int, conn: Any) -> None:
    """A worker process of a server of several (:class:`openenv.workers.Supervisor`'s target)."""
    os.environ.pop(PARENT_FD_ENV, None)  # the supervisor's promise, not this process's fd
    configure_logging(config.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        _run(_worker_async(config, index, restarts, conn))


async def _worker_async(config: WorkerConfig, index: int, restarts: int, conn: Any) -> None:
    try:
        factory = config.factory() if isinstance(config.factory, WorkerFactory) else config.factory
        h = Host(
            factory,
            config.host,
            config.port,
            http_port=config.http_port,
            http_host=config.http_host,
            binary_port=config.binary_port,
            settings=config.settings,
            **config.keywords,
        )
        h._worker = (config.run_dir, index, config.count, restarts)
        await h.start()
    except BaseException as e:  # noqa: BLE001 (told to the supervisor, then the worker exits)
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(e).__name__}: {e}"))
        raise SystemExit(1) from None
    conn.send({"grpc": h.address, "http": h.http_url, "binary": h.binary_url})
    loop = asyncio.get_running_loop()
    gone = asyncio.Event()  # the supervisor's end of the pipe closed: it is gone

    def readable() -> None:
        try:
            conn.recv_bytes()  # the supervisor never writes: only EOF gets here
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            gone.set()

    loop.add_reader(conn.fileno(), readable)

    async def until_over() -> None:
        done = {asyncio.ensure_future(h.wait()), asyncio.ensure_future(gone.wait())}
        _, pending = await asyncio.wait(done, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()

    async def drain() -> None:
        log.info("worker %d draining (grace %.0f s)", index, config.grace_s)
        await h.stop(config.grace_s)

    await _until_signalled(until_over(), drain)


def _say(lines: list[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr, flush=True)


async def serve_async(
    factory: Callable[..., Environment] | type[Environment],
    host: str = "127.0.0.1",
    port: int | None = 50051,
    *,
    ready: Callable[[Host], Any] | None = None,
    grace_s: float = 10.0,
    http_port: int | None = DEFAULT,
    http_host: str | None = None,
    metrics_port: int | None = None,
    binary_port: int | None = None,
    settings: ServerSettings | None = None,
    worker_factory: Any = None,
    **keywords: Unpack[HostKeywords],
) -> None:
    """Serve until SIGTERM or SIGINT, then drain (see :func:`serve`)."""
    h = Host(
        factory,
        host,
        port,
        http_port=http_port,
        http_host=http_host,
        metrics_port=metrics_port,
        binary_port=binary_port,
        settings=settings,
        worker_factory=worker_factory,
        **keywords,
    )
    h.grace_s = grace_s
    await h.start()
    (ready or (lambda srv: _say(srv.describe())))(h)

    async def drain() -> None:
        log.info("shutting down: draining sessions (grace %.0f s)", grace_s)
        await h.stop(grace_s)

    await _until_signalled(h.wait(), drain)


def _run(coro: Any) -> None:
    try:
        import uvloop  # optional: the http extra brings it
    except ImportError:
        asyncio.run(coro)
        return
    uvloop.run(coro)


def serve(
    factory: Callable[..., Environment] | type[Environment],
    host: str = "127.0.0.1",
    port: int | None = 50051,
    *,
    ready: Callable[[Host], Any] | None = None,
    grace_s: float = 10.0,
    http_port: int | None = DEFAULT,
    http_host: str | None = None,
    metrics_port: int | None = None,
    binary_port: int | None = None,
    settings: ServerSettings | None = None,
    worker_factory: Any = None,
    **keywords: Unpack[HostKeywords],
) -> None:
    """Serve an environment until SIGTERM/SIGINT, then drain gracefully; prints where it
    listens (to stderr) once serving.

    Args:
        factory: an :class:`Environment` subclass, or a callable returning an instance;
            called once per session with the handshake options as keyword arguments.
        host, port: the gRPC listener (port 0 picks a free port; None: no gRPC).
        http_port: the HTTP side (OpenEnv's /ws, /mcp, /health, ...; docs/bridge.md);
            default :func:`default_http_port` when the ``http`` extra is installed; None:
            gRPC only.
        http_host: interface of the HTTP side (default: ``host``).
        metrics_port: also serve ``/metrics`` on this port (see :class:`Host`).
        binary_port: also serve the binary transport on a picows listener of its own (see :class:`Host`).
        grace_s: how long a drain waits for requests in progress (in each worker).
        worker_factory: what each worker process makes its factory from (see :class:`Host`).
        ready: called with the started :class:`Host` (instead of printing its addresses).
        settings: how it serves (:class:`~openenv.settings.ServerSettings`: limits such as
            ``max_sessions``, ``max_message_bytes``, ``idle_timeout_s``, ``resume_grace_s``,
            ``isolation``; security: tokens, TLS, ``allow_anonymous``; the HTTP side's
            transport; ``grpc_library``; ``metrics``, ``web``); docs/security.md.
        **keywords: deprecated, removed in 0.3 (see :class:`Host`): field names of ``settings``
            and of the objects it holds, applied over it (``openenv.serve(Env, max_sessions=8)``
            is ``settings=ServerSettings(limits=Limits(max_sessions=8))``).
    """
    _run(
        serve_async(
            factory,
            host,
            port,
            ready=ready,
            grace_s=grace_s,
            http_port=http_port,
            http_host=http_host,
            metrics_port=metrics_port,
            binary_port=binary_port,
            settings=settings,
            worker_factory=worker_factory,
            **keywords,
        )
    )


async def serve_bridge_async(
    target: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    options: Any = None,
    settings: ServerSettings | None = None,
    connect_timeout: float = 30.0,
    ready: Callable[[Any], Any] | None = None,
    allow_anonymous: bool = False,
    token: str | None = None,
    ca_file: str | None = None,
    web: bool | None = None,
) -> None:
    """Serve OpenEnv's HTTP surface for the gRPC environment at ``target`` until SIGTERM/SIGINT
    (with ``/metrics``, and the ``/web`` playground when ``web``, default: on loopback).

    ``settings`` (:class:`~openenv.settings.ServerSettings`): its ``http`` transport and its
    ``security`` (tokens, TLS, origins and hosts) are the bridge's own; ``options`` (an
    :class:`openenv.http.HttpOptions`) is the deprecated form of the same. ``token`` and
    ``ca_file`` are what the bridge presents to, and trusts of, the gRPC server (``grpcs://``
    targets)."""
    b = _http_side()
    if options is not None:
        settings = options.server_settings()
    settings = settings if settings is not None else ServerSettings()
    check_bind(host, settings.security.tokens, allow_anonymous, "the bridge")
    backend = await _remote().connect(target, connect_timeout=connect_timeout, token=token, ca_file=ca_file)
    app = b.ObservedApp(
        b.BridgeApp(backend, max_message_bytes=settings.http_message_bytes()),
        Observer(max_sessions=backend.max_sessions),
        web=is_loopback(host) if web is None else web,
    )
    server = b.HttpServer(app, host, b.DEFAULT_HTTP_PORT if port is None else port, settings=settings)
    await server.start()
    (ready or (lambda s: _say([f"bridging {target} on {s.url} (WebSocket {s.url}/ws)"])))(server)

    async def shut() -> None:
        log.info("bridge shutting down")
        await server.stop()

    await _until_signalled(asyncio.Event().wait(), shut)


def serve_bridge(target: str, host: str = "127.0.0.1", port: int | None = None, **kwargs: Any) -> None:
    """Blocking :func:`serve_bridge_async` (on uvloop when installed)."""
    _run(serve_bridge_async(target, host, port, **kwargs))
