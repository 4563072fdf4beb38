"""The gRPC transport: ``EnvironmentService`` on grpc.aio, plus health and reflection.

:class:`Server` is the gRPC listener of one environment (its own sessions, or those of a
:class:`~openenv.runtime.SessionManager` it shares with the HTTP side). ``openenv.serve``
and :class:`openenv.Host` run it, with or without the HTTP side.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from openenv.errors import EnvError, FailedPrecondition, Internal, InvalidArgument, ResourceExhausted
from openenv.protocol import PROTOCOL_VERSION, StepResult
from openenv.runtime import pipelined
from openenv.runtime.environment import Environment
from openenv.runtime.load import server_load
from openenv.runtime.resume import Resumable, Resumes
from openenv.runtime.session import (
    CLIENT,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RESUME_GRACE_S,
    Runtime,
    SessionManager,
    client_host,
)
from openenv.runtime.session import Session as RuntimeSession  # `Session` is also the servicer's RPC
from openenv.runtime.tasks import answer_list_tasks, with_task
from openenv.runtime.vector import VectorSession
from openenv.security import TlsConfig, TokenSet
from openenv.security.grpc_guard import GuardInterceptor, Undecodable
from openenv.v1 import environment_pb2, environment_pb2_grpc, error_pb2, load_pb2
from openenv.values import from_struct, to_struct
from openenv.wire.jsontext import least_size

log = logging.getLogger("openenv.server")

SERVICE_NAME = environment_pb2.DESCRIPTOR.services_by_name["EnvironmentService"].full_name

__all__ = ["Server", "fill_time_step", "status_of"]

_CLOSE = object()

DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
"""A stream that has not sent its handshake within this time ends with DEADLINE_EXCEEDED."""


def _decoded(req: Any) -> environment_pb2.SessionRequest:
    if isinstance(req, Undecodable):
        raise InvalidArgument(req.describe("SessionRequest"))
    return cast(environment_pb2.SessionRequest, req)


def _bounded_serializer(limit: int) -> Callable[[environment_pb2.SessionResponse], bytes]:
    """Serialize a SessionResponse once; one larger than the message limit (which would end
    the whole stream) is replaced by an in-band, non-fatal RESOURCE_EXHAUSTED for the same
    request (RFC 0003)."""

    def serialize(resp: environment_pb2.SessionResponse) -> bytes:
        data = resp.SerializeToString()
        if len(data) <= limit:
            return data
        out = environment_pb2.SessionResponse(request_id=resp.request_id)
        out.error.CopyFrom(
            status_of(
                ResourceExhausted(
                    f"the reply ({resp.WhichOneof('kind')}, {len(data)} bytes) exceeds the {limit}-byte message "
                    "limit; the request was carried out"
                )
            )
        )
        return out.SerializeToString()

    return serialize


def status_of(err: EnvError) -> error_pb2.Status:
    """The wire form of an error."""
    return err.to_proto()


def fill_time_step(ts: environment_pb2.TimeStep, r: StepResult[Any], runtime: Runtime) -> None:
    """Encode a StepResult into a TimeStep."""
    if r.observation is not None:
        runtime.observation_codec.encode(r.observation, ts.observation)
    if r.reward is not None:
        ts.reward = r.reward
    ts.terminated = bool(r.terminated)
    ts.truncated = bool(r.truncated)
    if r.metadata:
        to_struct(r.metadata, ts.metadata)
    if r.reward_breakdown is not None:
        bd = r.reward_breakdown
        ts.reward_breakdown.CopyFrom(bd.to_proto() if hasattr(bd, "to_proto") else bd)
    ts.episode_id = r.episode_id
    ts.step_count = r.step_count


def _major(version: str) -> int:
    """The major of a ``"MAJOR.MINOR"`` version (two decimal integers); ValueError otherwise."""
    major, dot, minor = version.partition(".")
    if not (dot and major.isdecimal() and minor.isdecimal() and major.isascii() and minor.isascii()):
        raise ValueError(version)
    return int(major)


class _Servicer:
    # Implements every RPC of EnvironmentService (Session, GetInfo, GetLoad), so it does not subclass the
    # generated EnvironmentServiceServicer (untyped: Any to the checker), whose methods only
    # answer UNIMPLEMENTED; add_EnvironmentServiceServicer_to_server takes it as it is.
    def __init__(self, manager: SessionManager, handshake_timeout_s: float | None = None) -> None:
        self.manager = manager
        self.handshake_timeout_s = handshake_timeout_s
        self.runtime = manager.runtime
        self.info_response = environment_pb2.GetInfoResponse(info=self.runtime.info)
        self.resumes = Resumes.of(manager)

    async def GetInfo(self, request: Any, context: Any) -> environment_pb2.GetInfoResponse:  # noqa: N802
        return self.info_response

    async def GetLoad(self, request: Any, context: Any) -> load_pb2.GetLoadResponse:  # noqa: N802
        return load_pb2.GetLoadResponse(load=server_load(self.manager))

    async def Session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:  # noqa: N802
        CLIENT.set(client_host(context.peer() or ""))  # this RPC's task: sessions counted per client
        session: RuntimeSession | VectorSession | None = None
        entry: Resumable | None = None  # set when the session is resumable (RFC 0006)
        ended: list[EnvError] = []
        dropped = False
        taken_over: list[bool] = []
        task = asyncio.current_task()

        def take_over() -> None:  # another stream resumed this session: end this one, keep the session
            if not taken_over and task is not None:
                taken_over.append(True)
                task.cancel()

        def terminate(err: EnvError) -> None:
            if not ended:
                ended.append(err)
                if task is not None:  # always: this runs inside the RPC's task
                    task.cancel()

        try:
            try:
                first = await asyncio.wait_for(context.read(), self.handshake_timeout_s)
            except TimeoutError:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no handshake within {self.handshake_timeout_s:g} s"
                )
            if first is grpc.aio.EOF:
                return
            resp = environment_pb2.SessionResponse(request_id=getattr(first, "request_id", 0))
            try:
                session, entry = await self._handshake(_decoded(first), resp, task)
            except EnvError as e:
                e.fatal = True
                resp.error.CopyFrom(status_of(e))
                await context.write(resp)
                return
            session.on_terminate(terminate)
            if entry is not None:
                entry.on_takeover = take_over
            first = None  # a request's message goes before its answer is sent (peak memory per message)
            await context.write(resp)
            while True:
                req = await context.read()
                if req is grpc.aio.EOF:
                    # A resumable session ends with a close request; a reset connection reads as
                    # end of input too, so without one the client may come back.
                    dropped = entry is not None
                    return
                if isinstance(req, Undecodable):  # answered in band, never recorded (RFC 0003)
                    resp = environment_pb2.SessionResponse(request_id=req.request_id)
                    resp.error.CopyFrom(status_of(InvalidArgument(req.describe("SessionRequest"))))
                elif req.HasField("pipelined"):  # several requests in one message (RFC 0009)
                    answers, over = await self._answer_pipelined(session, entry, req)
                    req = None
                    for resp in answers:
                        await context.write(resp)
                    if over:
                        return
                    continue
                elif entry is not None:  # exactly once: a request re-sent after a drop is answered from the record
                    resp = await entry.journal.answer(req, functools.partial(self._answer, session, req))
                else:
                    owned, req = [req], None  # handed over: freed once decoded, before the reply is built
                    resp = await self._answer(session, owned)
                req = None
                await context.write(resp)
                kind = resp.WhichOneof("kind")
                if kind == "close" or (kind == "error" and resp.error.fatal):
                    return
        except asyncio.CancelledError:
            if taken_over:
                dropped = True
                await context.abort(grpc.StatusCode.ABORTED, "the session was resumed on another stream")
            if not ended:
                dropped = True
                raise  # the client went away or the server is stopping
            err = ended[0]
            await context.abort(_GRPC_CODES[int(err.code)], err.message)
        finally:
            if entry is not None:
                if dropped and not self.manager.draining and not entry.session.closed:
                    self.resumes.park(entry)  # the client may come back with the token
                    session = None
                else:
                    self.resumes.forget(entry)
                    await entry.journal.settle()
            if session is not None:
                await session.close()

    async def _answer_pipelined(
        self,
        session: RuntimeSession | VectorSession,
        entry: Resumable | None,
        req: environment_pb2.SessionRequest,
    ) -> tuple[list[environment_pb2.SessionResponse], bool]:
        """The answers to a pipelined message (runtime.pipelined), each request answered as
        if it had come alone (from the record, for a resumable session)."""

        async def one(item: environment_pb2.SessionRequest) -> environment_pb2.SessionResponse:
            if entry is not None:
                return await entry.journal.answer(item, functools.partial(self._answer, session, item))
            return await self._answer(session, item)

        caps = self.runtime.info.capabilities
        load = self.manager.load
        load.pipelined_messages += 1
        load.pipelined_requests += len(req.pipelined.requests)
        return await pipelined.answer(
            req,
            one,
            max_requests=caps.max_pipelined_requests if caps.pipelined_requests else 0,
            max_message_bytes=self.runtime.max_message_bytes,
        )

    async def _answer(
        self,
        session: RuntimeSession | VectorSession,
        req: environment_pb2.SessionRequest | list[environment_pb2.SessionRequest],
    ) -> environment_pb2.SessionResponse:
        """The answer to one request (an error answer when it fails). A request handed over
        in a one-item list is taken out of it: its message (upb's arena: the whole request)
        is then dropped as soon as its payload is decoded, before the environment runs and
        the reply is built, so the two never take memory at once."""
        owned = req if isinstance(req, list) else [req]
        first = owned[0]
        resp = environment_pb2.SessionResponse(request_id=first.request_id)
        kind = first.WhichOneof("kind")
        del first, req
        try:
            await self._dispatch(session, owned, resp)
        except EnvError as e:
            resp.error.CopyFrom(status_of(e))
        except RecursionError:
            resp.error.CopyFrom(status_of(InvalidArgument("the request is nested too deeply")))
        except Exception as e:
            log.warning("request %s of session %s failed", kind, session.id, exc_info=True)
            resp.error.CopyFrom(status_of(Internal(f"{type(e).__name__}: {e}")))
        return resp

    async def _handshake(
        self,
        req: environment_pb2.SessionRequest,
        resp: environment_pb2.SessionResponse,
        task: asyncio.Task[Any] | None,
    ) -> tuple[RuntimeSession | VectorSession, Resumable | None]:
        if req.WhichOneof("kind") != "handshake":
            raise FailedPrecondition(
                f"the first request of a session must be a handshake, got {req.WhichOneof('kind') or 'nothing'}"
            )
        hs = req.handshake
        if not hs.protocol_version:
            raise InvalidArgument('handshake.protocol_version is required (e.g. "1.0")')
        try:
            major = _major(hs.protocol_version)
        except ValueError:
            raise FailedPrecondition(
                f"unparsable protocol_version {hs.protocol_version!r}: expected "
                f'"MAJOR.MINOR"; this server speaks {PROTOCOL_VERSION}'
            ) from None
        if major != _major(PROTOCOL_VERSION):
            raise FailedPrecondition(
                f"protocol version {hs.protocol_version} is not supported; this server speaks {PROTOCOL_VERSION}"
            )
        session: RuntimeSession | VectorSession
        entry: Resumable | None = None
        out = resp.handshake
        if hs.resume_token:
            entry = await self.resumes.take(hs.resume_token, task)
            session = entry.session
            out.resume_token, out.resumed = entry.token, True
        elif hs.num_envs > 1:
            session = VectorSession(
                await self.manager.open_many(hs.num_envs, from_struct(hs.options), hs.client_name), hs.autoreset_mode
            )
        else:
            session = await self.manager.open(from_struct(hs.options), hs.client_name)
            if hs.resumable and self.runtime.resume_grace_s > 0:  # vectorised sessions are not resumable
                entry = self.resumes.register(session, task)
                out.resume_token = entry.token
        out.session_id = session.id
        out.protocol_version = PROTOCOL_VERSION
        out.info.CopyFrom(self.runtime.info)
        return session, entry

    async def _dispatch(
        self,
        session: RuntimeSession | VectorSession,
        owned: list[environment_pb2.SessionRequest],
        resp: environment_pb2.SessionResponse,
    ) -> Any:
        req = owned.pop()  # the only reference when the caller handed it over (_answer)
        kind = req.WhichOneof("kind")
        rt = self.runtime
        if isinstance(session, VectorSession):
            return await self._dispatch_vector(session, kind, req, resp)
        if kind == "step":
            st = req.step
            session._require_sim("step")  # UNIMPLEMENTED in tools-only mode comes before a bad payload (§3.5)
            action = rt.action_codec.decode(st.action)
            timeout = st.timeout.ToNanoseconds() / 1e9 if st.HasField("timeout") else None
            del st, req  # decoded: the request's message goes
            before = session.status
            result = await session.step(action, timeout)
            try:
                fill_time_step(resp.step.time_step, result, rt)
            except Exception as e:
                session.retract_step(before)  # an answer that cannot be sent is not a step
                raise Internal(f"the step's result cannot be encoded: {type(e).__name__}: {e}") from e
        elif kind == "reset":
            r = req.reset
            options = with_task(rt.tasks, r.task_id, from_struct(r.options))  # RFC 0004
            seed, episode_id = r.seed if r.HasField("seed") else None, r.episode_id or None
            del r, req  # decoded: the request's message goes
            result = await session.reset(seed, episode_id, options)
            fill_time_step(resp.reset.time_step, result, rt)
        elif kind == "state":
            s = await session.state()
            out = resp.state
            out.episode_id, out.step_count = s.episode_id, s.step_count
            # The generated stubs type an enum field as its enum class; the field holds the number.
            out.status = cast(environment_pb2.EpisodeStatus, int(s.status))
            if s.state is not None:
                rt.state_codec.encode(s.state, out.state)
        elif kind == "list_tools":
            for t in await session.list_tools():
                resp.list_tools.tools.append(t.to_proto())
        elif kind == "call_tool":
            c = req.call_tool
            timeout = c.timeout.ToNanoseconds() / 1e9 if c.HasField("timeout") else None
            name, arguments = c.name, from_struct(c.arguments)
            del c, req  # decoded: the request's message goes
            tool_result = await session.call_tool(name, arguments, timeout)
            del arguments
            limit = rt.max_message_bytes
            least = least_size((tool_result.content, tool_result.structured_content), limit)
            if least > limit:  # refused before it is built and serialized (the serializer would refuse it)
                raise ResourceExhausted(
                    f"the reply (call_tool, over {least} bytes) exceeds the {limit}-byte message limit; "
                    "the request was carried out"
                )
            resp.call_tool.name = name
            tool_result.to_proto(resp.call_tool.result)
        elif kind == "snapshot":
            resp.snapshot.snapshot.CopyFrom(await session.snapshot())
        elif kind == "restore":
            await session.restore(req.restore.snapshot)
            restored = resp.restore
            restored.episode_id, restored.step_count = session.episode_id, session.step_count
            restored.status = cast(environment_pb2.EpisodeStatus, int(session.status))  # as for state
        elif kind == "fork":
            f = req.fork
            forks = await self.resumes.fork(session, f.count, f.snapshot if f.HasField("snapshot") else None)
            resp.fork.session_ids.extend(e.session.id for e in forks)
            resp.fork.resume_tokens.extend(e.token for e in forks)
        elif kind == "list_tasks":
            answer_list_tasks(rt.tasks, req.list_tasks, resp.list_tasks)
        elif kind == "close":
            resp.close.SetInParent()
            return _CLOSE
        elif kind == "handshake":
            raise FailedPrecondition("the session is already open: handshake may only be sent once")
        elif kind in ("batch_reset", "batch_step"):
            raise FailedPrecondition(f"{kind} needs a vectorised session (handshake num_envs > 1)")
        else:
            raise InvalidArgument("request has no kind set")
        return None

    async def _dispatch_vector(
        self,
        vs: VectorSession,
        kind: str | None,
        req: environment_pb2.SessionRequest,
        resp: environment_pb2.SessionResponse,
    ) -> Any:
        rt = self.runtime
        if kind == "batch_step":
            bs = req.batch_step
            actions = [rt.action_codec.decode(a) for a in bs.actions]
            timeout = bs.timeout.ToNanoseconds() / 1e9 if bs.HasField("timeout") else None
            ids, results, finals = await vs.step(bs.env_ids, actions, timeout)
            out = resp.batch_step
            out.env_ids.extend(ids)
            for r in results:
                fill_time_step(out.time_steps.add(), r, rt)
            for i, r in finals.items():
                fill_time_step(out.final_time_steps[i], r, rt)
        elif kind == "batch_reset":
            br = req.batch_reset
            ids, results = await vs.reset(br.env_ids, br.seeds, from_struct(br.options), br.task_ids)
            resp.batch_reset.env_ids.extend(ids)
            for r in results:
                fill_time_step(resp.batch_reset.time_steps.add(), r, rt)
        elif kind == "state":
            s = await vs.state(req.state.env_id)
            state_out = resp.state
            state_out.episode_id, state_out.step_count = s.episode_id, s.step_count
            state_out.status = cast(environment_pb2.EpisodeStatus, int(s.status))  # as in _dispatch
            if s.state is not None:
                rt.state_codec.encode(s.state, state_out.state)
        elif kind == "list_tasks":
            answer_list_tasks(rt.tasks, req.list_tasks, resp.list_tasks)
        elif kind == "close":
            resp.close.SetInParent()
            return _CLOSE
        elif kind == "handshake":
            raise FailedPrecondition("the session is already open: handshake may only be sent once")
        elif kind is None:
            raise InvalidArgument("request has no kind set")
        else:
            raise FailedPrecondition(
                f"{kind} is not available in a vectorised session: use batch_reset / batch_step / state(env_id)"
            )
        return None


_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}


def max_streams(max_sessions: int) -> int:
    """Concurrent streams one connection may open: a stream per session and 16 for unary calls
    (at least 128): a client multiplexing all its sessions on one connection is never made to wait."""
    return max(128, max_sessions + 16)


class Server:
    """The gRPC listener of an environment. ``await start()``, then ``await stop()``.

    ``factory`` is an :class:`Environment` subclass (or a callable returning instances),
    with the runtime's keywords (``max_sessions``, ``idle_timeout_s``, ...); or a
    :class:`SessionManager` shared with other listeners (then the keywords are its own and
    whoever made it drains and shuts it down). ``interceptors`` are ``grpc.aio`` server
    interceptors (:class:`openenv.Host` adds the metrics/logs/traces one), run outside the
    listener's own guard. ``tokens``: the bearer tokens every call but health checks needs
    (RFC 0003); ``tls``: serve ``grpcs``; ``handshake_timeout_s``: how long a stream may stay
    silent before its handshake; ``isolation``: ``"process"`` runs each session's environment
    in a worker process; ``inline_threshold_s``: sync hooks measured faster run on the event
    loop (0: never; default ``$OPENENV_INLINE_THRESHOLD_US`` or 50 µs; :mod:`openenv.runtime.inline`);
    ``max_pipelined_requests``: the most requests one pipelined message
    may carry (RFC 0009; 0: pipelined messages are not accepted, clients send requests one by
    one).
    """

    def __init__(
        self,
        factory: Callable[..., Environment] | type[Environment] | SessionManager,
        host: str = "127.0.0.1",
        port: int = 50051,
        *,
        max_sessions: int | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        tools_only: bool = False,
        max_num_envs: int | None = None,
        reflection: bool = True,
        resume_grace_s: float = DEFAULT_RESUME_GRACE_S,
        interceptors: Sequence[Any] = (),
        tokens: TokenSet | None = None,
        tls: TlsConfig | None = None,
        handshake_timeout_s: float | None = DEFAULT_HANDSHAKE_TIMEOUT_S,
        isolation: str = "thread",
        max_sessions_per_client: int = 0,
        inline_threshold_s: float | None = None,
        max_pipelined_requests: int = pipelined.DEFAULT_MAX_PIPELINED_REQUESTS,
    ) -> None:
        if isinstance(factory, SessionManager):
            self.manager, self._owns_manager = factory, False
        else:
            runtime = Runtime(
                factory,
                max_sessions=max_sessions,
                max_message_bytes=max_message_bytes,
                idle_timeout_s=idle_timeout_s,
                tools_only=tools_only,
                max_num_envs=max_num_envs,
                resume_grace_s=resume_grace_s,
                isolation=isolation,
                max_sessions_per_client=max_sessions_per_client,
                inline_threshold_s=inline_threshold_s,
            )
            self.manager, self._owns_manager = SessionManager(runtime), True
        self.runtime = self.manager.runtime
        self.host, self.requested_port = host, port
        self.port: int | None = None
        self.reflection = reflection
        self.interceptors = list(interceptors)  # grpc.aio server interceptors (e.g. metrics, traces)
        self._server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.tokens, self.tls = tokens or TokenSet(), tls
        self.handshake_timeout_s = handshake_timeout_s or None
        caps = self.runtime.info.capabilities  # what GetInfo and the handshake tell clients (RFC 0003)
        caps.auth_required = bool(self.tokens)
        caps.pipelined_requests = max_pipelined_requests > 0  # RFC 0009
        caps.max_pipelined_requests = max(0, max_pipelined_requests)
        if self.handshake_timeout_s:
            caps.handshake_timeout.FromNanoseconds(int(self.handshake_timeout_s * 1e9))

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
                    self.tokens,
                    tolerant={f"/{SERVICE_NAME}/Session": environment_pb2.SessionRequest.DESCRIPTOR},
                    serializers={f"/{SERVICE_NAME}/Session": _bounded_serializer(limit)},
                ),
            ],
            options=[
                ("grpc.so_reuseport", 0),
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
            ],
        )
        servicer = _Servicer(self.manager, self.handshake_timeout_s)
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
