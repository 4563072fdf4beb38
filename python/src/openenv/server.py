"""The gRPC transport: ``EnvironmentService`` on grpc.aio, plus health and reflection.

:class:`Server` is the gRPC listener of one environment (its own sessions, or those of a
:class:`~openenv.runtime.SessionManager` it shares with the HTTP side). ``openenv.serve``
and :class:`openenv.Host` run it, with or without the HTTP side.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Unpack, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

import openenv.engine as _engine_module  # looked up when a server starts (the certifier's mutants replace it)
from openenv.engine import (
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    Engine,
    Incoming,
    bounded_serializer,
    fill_time_step,
    status_of,
)
from openenv.errors import ErrorCode
from openenv.runtime.environment import Environment
from openenv.runtime.session import EnvironmentRuntime, SessionManager
from openenv.security.grpc_guard import GuardInterceptor
from openenv.settings import ServerKeywords, ServerSettings, legacy_keywords
from openenv.v1 import environment_pb2, environment_pb2_grpc, load_pb2

log = logging.getLogger("openenv.server")

SERVICE_NAME = environment_pb2.DESCRIPTOR.services_by_name["EnvironmentService"].full_name

__all__ = ["DEFAULT_HANDSHAKE_TIMEOUT_S", "Server", "fill_time_step", "status_of"]

_bounded_serializer = bounded_serializer  # the name it had here (kept for importers)


class _Aborted(Exception):
    """Ends a ``Session`` handler once :meth:`_GrpcStream.abort` has sent the call's status."""


def _unlinked(error: BaseException) -> BaseException:
    """``error`` without its traceback and chained exceptions (the frames they hold)."""
    error.__traceback__ = error.__context__ = error.__cause__ = None
    return error


class _GrpcStream:
    """A grpc.aio ``Session`` call as the engine's :class:`~openenv.engine.Stream`."""

    __slots__ = ("_context",)
    encode_result = None  # the engine encodes results as protobuf
    relayed = False  # a client's own stream (not relayed by a sibling worker)

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    async def read(self) -> Incoming:
        req = await self._context.read()
        return None if req is grpc.aio.EOF else req

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        await self._context.write(response)

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        # grpc.aio keeps the AbortError it raises on the call and raises it again once the
        # handler returns. Let through, it would carry the frames it passed (the engine's, this
        # stream's, the observer's) and they the call: a reference cycle of ~80 objects per
        # aborted call, freed only by a full collection. 2,000 silent streams ended at their
        # handshake deadline left 154,000 such objects, and the collections they caused took
        # most of the server's time during the next burst (issue 50). So the AbortError goes
        # back to grpc bare, and the handler ends with an exception nothing else holds.
        try:
            await self._context.abort(_GRPC_CODES[int(code)], message)
        except grpc.aio.AbortError as e:
            _unlinked(e)
        raise _Aborted

    def peer(self) -> str:
        return self._context.peer() or ""

    def metadata(self) -> Sequence[tuple[str, str]]:
        return tuple((k, v) for k, v in self._context.invocation_metadata() or () if isinstance(v, str))


class _Servicer:
    # Implements every RPC of EnvironmentService (Session, GetInfo, GetLoad) over the engine, so it
    # does not subclass the generated EnvironmentServiceServicer (untyped: Any to the checker),
    # whose methods only answer UNIMPLEMENTED; add_EnvironmentServiceServicer_to_server takes it.
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def GetInfo(self, request: Any, context: Any) -> environment_pb2.GetInfoResponse:  # noqa: N802
        return cast(environment_pb2.GetInfoResponse, self.engine.info())

    async def GetLoad(self, request: Any, context: Any) -> load_pb2.GetLoadResponse:  # noqa: N802
        return cast(load_pb2.GetLoadResponse, await self.engine.load_report())

    async def Session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:  # noqa: N802
        try:
            await self.engine.serve(_GrpcStream(context))
        except _Aborted:
            pass  # the status is sent; grpc ends the call with its own AbortError (_GrpcStream.abort)


_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}


UNREQUESTED_S = 600
"""Seconds a call may wait for the server to pick it up before gRPC cancels it (gRPC's
default, 30 s, cancelled the tail of a connect burst; see :meth:`Server.start`)."""


def max_streams(max_sessions: int) -> int:
    """Concurrent streams one connection may open: a stream per session and 16 for unary calls
    (at least 128): a client multiplexing all its sessions on one connection is never made to wait."""
    return max(128, max_sessions + 16)


class Server:
    """The gRPC listener of an environment. ``await start()``, then ``await stop()``.

    ``factory`` is an :class:`Environment` subclass (or a callable returning instances); or a
    :class:`SessionManager` or an :class:`~openenv.engine.Engine` shared with other listeners
    (then its runtime's limits apply, and whoever made it drains and shuts it down).
    ``settings`` (:class:`~openenv.settings.ServerSettings`) says how it serves: its limits
    (capacity, message size, handshake deadline, pipelined messages, ...), its security
    (bearer tokens every call but health checks needs, RFC 0003; TLS: ``grpcs``) and whether it
    serves reflection; its HTTP and host-level fields are not this listener's. The keyword
    arguments (field names of those settings: ``max_sessions=``, ``tokens=``...; they override
    ``settings``) are deprecated and removed in 0.3 (:func:`openenv.settings.legacy_keywords`).
    ``engine``: the protocol engine to serve, shared with other listeners (as an
    :class:`~openenv.engine.Engine` given as ``factory``; any object that serves as one).
    ``interceptors`` are ``grpc.aio`` server interceptors (:class:`openenv.Host` adds the
    metrics/logs/traces one), run outside the listener's own guard.
    """

    def __init__(
        self,
        factory: Callable[..., Environment] | type[Environment] | SessionManager | Engine,
        host: str = "127.0.0.1",
        port: int = 50051,
        *,
        settings: ServerSettings | None = None,
        interceptors: Sequence[Any] = (),
        engine: Engine | None = None,
        **keywords: Unpack[ServerKeywords],
    ) -> None:
        # Only this listener's settings as keywords (as before): the library or the HTTP side's
        # transport, say, are chosen by whoever builds the listener (openenv.Host), not here.
        unknown = set(keywords) - ServerKeywords.__optional_keys__
        if unknown:
            raise TypeError(f"Server() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        given: Engine | None = engine
        if engine is not None:  # the engine of several listeners (anything that serves as one)
            factory = engine.manager
        if isinstance(factory, Engine | SessionManager):  # a shared runtime: its limits, unless told otherwise
            given = factory if isinstance(factory, Engine) else given
            manager = factory.manager if isinstance(factory, Engine) else factory
            settings = settings or ServerSettings(limits=manager.runtime.limits)
            if keywords:
                settings = legacy_keywords("Server", settings, keywords)
            self._owns_manager = False
        else:
            settings = legacy_keywords("Server", settings, keywords) if keywords else settings or ServerSettings()
            manager, self._owns_manager = SessionManager(EnvironmentRuntime(factory, limits=settings.limits)), True
        self.manager = manager
        #: How this listener serves (what was given, the keywords applied).
        self.settings = settings
        limits = settings.limits
        self.runtime = self.manager.runtime
        self.host, self.requested_port = host, port
        self.port: int | None = None
        #: Bind with SO_REUSEPORT: several worker processes share the port (openenv.workers).
        self.reuse_port = False
        self.reflection = settings.reflection
        self.interceptors = list(interceptors)  # grpc.aio server interceptors (e.g. metrics, traces)
        self._server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.tokens, self.tls = settings.security.tokens, settings.security.tls
        self.handshake_timeout_s = limits.handshake_timeout_s or None
        #: The protocol engine this listener serves (shared with the HTTP side by openenv.Host).
        #: It writes the capabilities clients are told from the settings (Engine's docstring).
        self.engine: Engine = given or _engine_module.Engine(self.manager, settings)

    @property
    def address(self) -> str:
        """``grpc://host:port`` (``grpcs://`` with TLS; loopback when bound to all interfaces)."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'grpcs' if self.tls else 'grpc'}://{host}:{self.port}"

    async def start(self) -> Server:
        limit = self.runtime.max_message_bytes
        streams = max_streams(self.runtime.max_sessions)
        pending = max(3000, 4 * streams)
        credentials = self.tls.grpc_credentials() if self.tls is not None else None
        server = grpc.aio.server(
            # The first interceptor is the outermost: the given ones (metrics, logs, traces) see
            # every call, the guard's refusals included, and wrap the handler the guard shaped
            # (tolerant request decoding, bounded replies).
            interceptors=[
                *self.interceptors,
                GuardInterceptor(
                    self.engine.authenticator,
                    tolerant={f"/{SERVICE_NAME}/Session": environment_pb2.SessionRequest.DESCRIPTOR},
                    serializers={f"/{SERVICE_NAME}/Session": bounded_serializer(limit)},
                ),
            ],
            options=[
                ("grpc.so_reuseport", 1 if self.reuse_port else 0),
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.keepalive_permit_without_calls", 1),
                # Clients may ping every 10 s (ours: 30 s). Ping strikes stay off: gRPC's
                # own BDP probes during large transfers would count as strikes and the
                # server would GOAWAY honest clients; a ping costs the server little.
                ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
                ("grpc.http2.max_ping_strikes", 0),
                # Dead peers are found by the server's own pings, not only by the idle reaper.
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.keepalive_timeout_ms", 20_000),
                # Streams of one connection: every session has one; silent ones end at the
                # handshake deadline.
                ("grpc.max_concurrent_streams", streams),
                # ... counted as HTTP/2 counts them (open streams), as clients do: they queue a
                # stream beyond the limit until one ends. gRPC's default also counts streams
                # that ended but whose call the server has not released yet, and refuses new
                # ones with RST_STREAM REFUSED_STREAM while the count is over: under a burst
                # of refused handshakes, a third of the streams beyond capacity ended REFUSED
                # (UNAVAILABLE) or INTERNAL instead of RESOURCE_EXHAUSTED (measured).
                ("grpc.http.overload_protection", 0),
                # Calls the server has not picked up yet: gRPC refuses them beyond a bound (by
                # default at random from 1,000, all beyond 3,000), an immediate status the
                # stock client reads as INTERNAL when its first write is in flight. One bound
                # instead: four connections' worth of streams (and at least gRPC's 3,000). It
                # also bounds what a stream flood (HTTP/2 "rapid reset") may make the server
                # hold: 4 x 100,000 reset streams cost 138 MiB at the default capacity (105 MiB
                # with gRPC's defaults; docs/security.md).
                ("grpc.server.max_pending_requests", pending),
                ("grpc.server.max_pending_requests_hard_limit", pending),
                ("grpc.max_metadata_size", 16 * 1024),
                # A call gRPC has accepted but this process has not picked up yet (grpc.aio
                # takes them one at a time, on its event loop) is cancelled after 30 s by
                # default: the client sees CANCELLED with no details. That measures the
                # server's backlog, not the peer: under a burst of 16,384 sessions it
                # cancelled half of them (issue 34, docs/performance.md). The queue is bounded
                # by count above; a client that stops waiting cancels its own stream.
                ("grpc.server_max_unrequested_time_in_server", UNREQUESTED_S),
            ],
        )
        servicer = _Servicer(self.engine)
        environment_pb2_grpc.add_EnvironmentServiceServicer_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if self.reflection:
            reflection.enable_server_reflection(
                [SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
                server,
            )
        address = f"{self.host}:{self.requested_port}"
        self.port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
        if not self.port:
            raise RuntimeError(f"cannot bind {self.host}:{self.requested_port}")
        await server.start()
        self._server = server
        await self.set_serving(True)
        if self._owns_manager:
            self.manager.start_reaper()
        log.info("serving %s on %s", self.runtime.env_cls.__name__, self.address)
        return self

    async def set_serving(self, serving: bool) -> None:
        """The health status of the server and of ``openenv.v1.EnvironmentService``."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain (when it owns its sessions): NOT_SERVING, refuse new sessions, finish
        requests in progress, end sessions; then stop listening."""
        if self._server is None:
            return
        await self.set_serving(False)
        if self._owns_manager:
            await self.manager.drain(grace_s)
        await self._server.stop(min(grace_s, 1.0))
        if self._owns_manager:
            await self.manager.shutdown()
        self._server = None

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> Server:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop(1.0)
