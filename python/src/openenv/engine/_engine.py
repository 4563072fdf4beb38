"""The protocol engine: every request kind of ``openenv.v1.EnvironmentService``, for any transport.

:class:`Engine` serves one environment's sessions (a :class:`~openenv.runtime.SessionManager`)
over :class:`~openenv.engine.Stream`\\ s: the handshake and its deadline, the dispatch of every
request kind to a session or a vectorised session, pipelined messages (RFC 0009), the resume
journal, forks and parked sessions (RFC 0006), in-band answers to undecodable requests and
bounded replies (RFC 0003), and the unary calls (``GetInfo``, ``GetLoad``). It knows nothing
of gRPC, WebSockets or JSON: the listeners (grpc.aio, grpclib, the binary WebSocket, OpenEnv's
``/ws`` by translation, the in-process connection) are adapters that carry its requests and
responses. docs/protocol.md (Listeners) lists what reaches which.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable
from typing import Any, cast

from openenv.engine._stream import Incoming, Prepared, Stream
from openenv.errors import (
    EnvError,
    ErrorCode,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    ResourceExhausted,
    Unimplemented,
)
from openenv.json_protocol.jsontext import least_size
from openenv.protocol import PROTOCOL_VERSION, StepResult
from openenv.runtime import pipelined
from openenv.runtime.granularity import Undecodable
from openenv.runtime.limits import DEFAULT_HANDSHAKE_TIMEOUT_S  # declared with the other limits
from openenv.runtime.load import server_load
from openenv.runtime.resume import Resumable, Resumes
from openenv.runtime.session import CLIENT, EnvironmentRuntime, SessionManager, client_host
from openenv.runtime.session import Session as RuntimeSession
from openenv.runtime.tasks import answer_list_tasks, with_task
from openenv.runtime.vector import VectorSession
from openenv.runtime.world import Seat, Worlds
from openenv.security.auth import Authenticator
from openenv.settings import ServerSettings, legacy_keywords
from openenv.v1 import environment_pb2, error_pb2, load_pb2, multiagent_pb2
from openenv.values import from_struct, to_struct

log = logging.getLogger("openenv.engine")

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT_S",
    "Engine",
    "advertise",
    "bounded_serializer",
    "fill_time_step",
    "status_of",
]

_CLOSE = object()


class _Worker:
    """What a resumable session's worker task and its stream's task share (Engine.serve)."""

    __slots__ = ("reading", "stop")

    def __init__(self) -> None:
        self.reading = False  # awaiting the next request: nothing in flight
        self.stop = False  # the stream ended: finish the request in flight, answer nothing more


#: Worker tasks still running (asyncio keeps only weak references to tasks): a worker left to
#: finish its request after its stream ended has no other owner.
_JOBS: set[asyncio.Task[bool]] = set()


def _job_done(job: asyncio.Task[bool]) -> None:
    _JOBS.discard(job)
    if not job.cancelled() and (exc := job.exception()) is not None:  # retrieved: its stream may be gone
        log.debug("a session worker ended with %r", exc)


def _decoded(req: Any) -> environment_pb2.SessionRequest:
    if isinstance(req, Undecodable):
        raise InvalidArgument(req.describe("SessionRequest"))
    return cast(environment_pb2.SessionRequest, req)


def bounded_serializer(limit: int) -> Callable[[environment_pb2.SessionResponse], bytes]:
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


_SEAT_EVENT_KINDS = {
    "left": multiagent_pb2.SEAT_EVENT_KIND_LEFT,
    "joined": multiagent_pb2.SEAT_EVENT_KIND_JOINED,
    "expired": multiagent_pb2.SEAT_EVENT_KIND_EXPIRED,
}


def fill_time_step(ts: environment_pb2.TimeStep, r: StepResult[Any], runtime: EnvironmentRuntime) -> None:
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
    if r.agents:  # RFC 0012: the views of the session's agents
        for agent, a in r.agents.items():
            at = ts.agents[agent]
            if a.observation is not None:
                runtime.observation_codec.encode(a.observation, at.observation)
            if a.reward is not None:
                at.reward = a.reward
            at.terminated, at.truncated = bool(a.terminated), bool(a.truncated)
            if a.metadata:
                to_struct(a.metadata, at.metadata)
            if a.reward_breakdown is not None:
                bd = a.reward_breakdown
                at.reward_breakdown.CopyFrom(bd.to_proto() if hasattr(bd, "to_proto") else bd)
        ts.to_act.extend(r.to_act)
        for ev in r.seat_events:  # RFC 0016
            se = ts.seat_events.add(kind=_SEAT_EVENT_KINDS[ev.kind], agent_ids=ev.agent_ids)
            if ev.rejoin_within is not None:
                se.rejoin_within.FromNanoseconds(int(ev.rejoin_within * 1e9))


def advertise(caps: environment_pb2.Capabilities, settings: ServerSettings) -> None:
    """Write into ``caps`` what ``settings`` make every listener enforce (RFC 0003, RFC 0009):
    whether a bearer token is required, pipelined messages and their bound, the handshake
    deadline. The other capabilities are the runtime's (its environment and limits)."""
    limits = settings.limits
    caps.auth_required = bool(settings.security.tokens)
    caps.pipelined_requests = limits.max_pipelined_requests > 0
    caps.max_pipelined_requests = limits.max_pipelined_requests
    if limits.handshake_timeout_s:
        caps.handshake_timeout.FromNanoseconds(int(limits.handshake_timeout_s * 1e9))
    else:
        caps.ClearField("handshake_timeout")


def info_digest(info: environment_pb2.EnvironmentInfo) -> str:
    """``sha256:`` and the hex SHA-256 of ``info``'s deterministic serialization (RFC 0013)."""
    return "sha256:" + hashlib.sha256(info.SerializeToString(deterministic=True)).hexdigest()


def _major(version: str) -> int:
    """The major of a ``"MAJOR.MINOR"`` version (two decimal integers); ValueError otherwise."""
    major, dot, minor = version.partition(".")
    if not (dot and major.isdecimal() and minor.isdecimal() and major.isascii() and minor.isascii()):
        raise ValueError(version)
    return int(major)


class Engine:
    """The protocol of one served environment, over any transport.

    ``manager`` holds the sessions (one engine per manager: every listener of a server shares
    it, so sessions, capacity and resume tokens are one pool whatever the transport).
    ``settings`` (:class:`~openenv.settings.ServerSettings`; default: the runtime's limits and
    no tokens) says how it serves: the handshake deadline, pipelined messages, and the bearer
    tokens a transport checks with :meth:`refusal` before it hands a stream to :meth:`serve`
    (RFC 0003; the engine never sees a refused stream). ``peers``: the worker siblings of a
    server of several processes (:class:`openenv.workers.WorkerPeers`), else None.
    ``handshake_timeout_s=`` and ``tokens=`` are the keywords before settings (deprecated).

    The capabilities clients are told (``GetInfo``, the handshake) are written here from the
    settings: ``auth_required``, ``pipelined_requests``, ``max_pipelined_requests`` and
    ``handshake_timeout`` (:func:`advertise`), so every listener of the engine advertises what
    it enforces, whichever of them run.

    What users may rely on: :meth:`serve` runs one ``Session`` stream to its end and never
    raises for anything the client sent (bad requests are answered in band; a fatal one
    ends the stream after its answer); it frees or parks the session whatever way the
    stream ends; :meth:`info` and :meth:`load` answer ``GetInfo`` and ``GetLoad``.
    """

    def __init__(
        self,
        manager: SessionManager,
        settings: ServerSettings | None = None,
        peers: Any = None,
        **legacy: Any,
    ) -> None:
        if legacy:  # handshake_timeout_s=, tokens=: the form before settings (openenv.settings.legacy_keywords)
            settings = legacy_keywords("Engine", settings or ServerSettings(limits=manager.runtime.limits), legacy)
        #: How this engine serves (default: the runtime's limits, no tokens). Its capabilities
        #: are written from it here, whichever listeners carry its streams.
        self.settings = settings if settings is not None else ServerSettings(limits=manager.runtime.limits)
        self.manager = manager
        self.handshake_timeout_s = self.settings.limits.handshake_timeout_s or None
        self.tokens = self.settings.security.tokens
        #: The one token check of every listener of this engine (:mod:`openenv.security.auth`).
        self.authenticator = Authenticator(self.tokens)
        self.runtime = manager.runtime
        advertise(self.runtime.info.capabilities, self.settings)
        self._info: environment_pb2.GetInfoResponse | None = None
        self.resumes = Resumes.of(manager)
        #: The worker siblings of this server (:class:`openenv.workers.WorkerPeers`) when it is
        #: one of several worker processes: :meth:`load_report` then reports them all, and
        #: :meth:`serve` relays a handshake with a sibling's resume or join token to it.
        self.workers: Any = peers

    # ------------------------------------------------------------------ unary calls

    def info(self) -> environment_pb2.GetInfoResponse:
        """The answer to ``GetInfo``: the runtime's info as it is at the first call (listeners
        set their capabilities before they serve); the same object every time: do not modify it."""
        if self._info is None:
            info = self.runtime.info
            self._info = environment_pb2.GetInfoResponse(info=info, info_digest=info_digest(info))
        return self._info

    def load(self) -> load_pb2.GetLoadResponse:
        """This process's own load (RFC 0005), measured now; with several workers, the whole
        server's as last reported (:meth:`load_report` asks them all)."""
        if self.workers is not None:
            return cast(load_pb2.GetLoadResponse, self.workers.cached_load())
        return load_pb2.GetLoadResponse(load=server_load(self.manager))

    async def load_report(self) -> load_pb2.GetLoadResponse:
        """The answer to ``GetLoad``: the server's load measured now, and with several worker
        processes (RFC 0013) the whole server's and each worker's."""
        if self.workers is not None:
            return cast(load_pb2.GetLoadResponse, await self.workers.load())
        return load_pb2.GetLoadResponse(load=server_load(self.manager))

    def refusal(self, authorization: str | None) -> str | None:
        """Why a call with this ``authorization`` header value is refused (UNAUTHENTICATED),
        or None when it may proceed (no tokens configured, or one of them)."""
        return self.authenticator.refusal(authorization)

    # ------------------------------------------------------------------ the Session stream

    async def serve(self, stream: Stream) -> None:
        """Run one ``Session`` stream to its end (see the class docstring). (A session another
        listener keeps, as ``/ws?session_id=`` drives one, is reached by relaying requests
        into that session's own stream: one stream per session.)"""
        CLIENT.set(client_host(stream.peer() or ""))  # this stream's task: sessions counted per client
        encode = stream.encode_result
        session: RuntimeSession | VectorSession | Seat | None = None
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
                if task is not None:  # always: this runs inside the stream's task
                    task.cancel()

        try:
            first: Incoming
            try:  # asyncio.timeout, not wait_for: no task of its own per stream (a burst opens thousands)
                async with asyncio.timeout(self.handshake_timeout_s):
                    first = await stream.read()
            except TimeoutError:
                await stream.abort(ErrorCode.DEADLINE_EXCEEDED, f"no handshake within {self.handshake_timeout_s:g} s")
            if first is None:
                return
            hello = first.request if isinstance(first, Prepared) else first
            if self.workers is not None and (sibling := self._holder(hello, stream)) is not None:
                if await self.workers.relay(stream, hello, sibling):
                    return  # served by the worker that holds the session or world (RFC 0013)
            resp = environment_pb2.SessionResponse(request_id=getattr(hello, "request_id", 0))
            try:
                session, entry = await self._handshake(_decoded(hello), resp, task)
            except EnvError as e:
                e.fatal = True
                resp.error.CopyFrom(status_of(e))
                await stream.write(resp)
                return
            session.on_terminate(terminate)
            if entry is not None:
                entry.on_takeover = take_over
            del first, hello  # a request's message goes before its answer is sent (peak memory per message)
            await stream.write(resp)
            if entry is None:
                dropped = await self._requests(stream, session, None, encode, None)
                return
            # A resumable session's requests run in a worker task of the stream, which a drop
            # (this task cancelled) does not cancel: a request in flight completes once and is
            # recorded; the worker stops at its next request boundary. One task per stream
            # instead of one per request (Journal.answer_here).
            worker = _Worker()
            job = asyncio.get_running_loop().create_task(self._requests(stream, session, entry, encode, worker))
            _JOBS.add(job)
            job.add_done_callback(_job_done)
            try:
                await asyncio.wait([job])
            except asyncio.CancelledError:
                worker.stop = True
                if worker.reading:  # between requests: nothing in flight to finish
                    job.cancel()
                raise
            dropped = job.result()  # the worker's end, its exception (a cancelled write too) included
        except asyncio.CancelledError:
            if taken_over:
                dropped = True
                await stream.abort(ErrorCode.ABORTED, "the session was resumed on another stream")
            if not ended:
                dropped = True
                raise  # the client went away or the server is stopping
            err = ended[0]
            await stream.abort(err.code, err.message)
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

    async def _requests(
        self,
        stream: Stream,
        session: RuntimeSession | VectorSession | Seat,
        entry: Resumable | None,
        encode: Callable[[Any], Any] | None,
        worker: _Worker | None,
    ) -> bool:
        """Read, answer and write the stream's requests after the handshake until it ends;
        True when it ended by a drop a resumable session survives (no close request). With
        ``worker`` (a resumable session's worker task) it stops at the request boundary after
        ``worker.stop`` is set, without writing the answer of a request it finished."""
        while True:
            if worker is not None:
                worker.reading = True
                req = await stream.read()
                worker.reading = False
                if worker.stop:
                    return False
            else:
                req = await stream.read()
            encoded: list[Any] = []
            if req is None:
                # A resumable session ends with a close request; a reset connection reads as
                # end of input too, so without one the client may come back.
                return entry is not None
            if isinstance(req, Undecodable):  # answered in band, never recorded (RFC 0003)
                resp = environment_pb2.SessionResponse(request_id=req.request_id)
                resp.error.CopyFrom(status_of(InvalidArgument(req.describe("SessionRequest"))))
            elif isinstance(req, Prepared):  # decoded by the transport: never journaled nor pipelined
                owned: list[Any] = [req]
                req = None
                resp = await self._answer(session, owned, encode, encoded)
            elif req.HasField("pipelined"):  # several requests in one message (RFC 0009)
                answers, over = await self._answer_pipelined(session, entry, req)
                req = None
                if worker is not None and worker.stop:
                    return False
                for resp in answers:
                    await stream.write(resp)
                if over:
                    return False
                continue
            elif entry is not None:  # exactly once: a request re-sent after a drop is answered from the record
                resp = await entry.journal.answer_here(req, functools.partial(self._answer, session, req))
            else:
                owned, req = [req], None  # handed over: freed once decoded, before the reply is built
                resp = await self._answer(session, owned, encode, encoded)
            req = None
            if worker is not None and worker.stop:
                return False
            await stream.write(resp, encoded[0] if encoded else None)
            kind = resp.WhichOneof("kind")
            if kind == "close" or (kind == "error" and resp.error.fatal):
                return False

    def _holder(self, hello: Any, stream: Stream) -> int | None:
        """With several workers: the sibling that holds the session a handshake resumes, or
        the world it joins (its token names that worker), or None (this worker serves it)."""
        if not isinstance(hello, environment_pb2.SessionRequest) or hello.WhichOneof("kind") != "handshake":
            return None
        hs = hello.handshake
        token = hs.world.join_token if self.runtime.multi_agent is not None else hs.resume_token
        if not token or stream.relayed:  # a relayed stream is never relayed again
            return None
        return cast("int | None", self.workers.sibling_of(token))

    async def _answer_pipelined(
        self,
        session: RuntimeSession | VectorSession | Seat,
        entry: Resumable | None,
        req: environment_pb2.SessionRequest,
    ) -> tuple[list[environment_pb2.SessionResponse], bool]:
        """The answers to a pipelined message (runtime.pipelined), each request answered as
        if it had come alone (from the record, for a resumable session)."""

        async def one(item: environment_pb2.SessionRequest) -> environment_pb2.SessionResponse:
            if entry is not None:  # in the stream's worker task (serve)
                return await entry.journal.answer_here(item, functools.partial(self._answer, session, item))
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
        session: RuntimeSession | VectorSession | Seat,
        req: environment_pb2.SessionRequest | list[Any],
        encode: Callable[[Any], Any] | None = None,
        encoded: list[Any] | None = None,
    ) -> environment_pb2.SessionResponse:
        """The answer to one request (an error answer when it fails). A request handed over
        in a one-item list is taken out of it: its message (upb's arena: the whole request)
        is then dropped as soon as its payload is decoded, before the environment runs and
        the reply is built, so the two never take memory at once. With ``encode`` (the
        stream's ``encode_result``), a time step is encoded by it into ``encoded``."""
        owned = req if isinstance(req, list) else [req]
        first = owned[0]
        head = first.request if isinstance(first, Prepared) else first
        resp = environment_pb2.SessionResponse(request_id=head.request_id)
        kind = head.WhichOneof("kind")
        del first, head, req
        try:
            await self._dispatch(session, owned, resp, encode, encoded)
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
    ) -> tuple[RuntimeSession | VectorSession | Seat, Resumable | None]:
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
        session: RuntimeSession | VectorSession | Seat
        entry: Resumable | None = None
        out = resp.handshake
        if self.runtime.multi_agent is not None:  # RFC 0012: create or join a world
            if hs.num_envs > 1:
                raise FailedPrecondition("a multi-agent environment does not offer vectorised sessions (num_envs > 1)")
            worlds = Worlds.of(self.manager)
            if hs.world.join_token:
                session = worlds.join(hs.world.join_token, list(hs.world.agent_ids))
            else:
                session = await worlds.create(from_struct(hs.options), hs.client_name, list(hs.world.agent_ids))
            w = out.world
            w.world_id, w.join_token, w.owner = session.world.id, session.world.join_token, session.owner
            w.agent_ids.extend(session.agents)
        elif hs.HasField("world"):
            name = self.runtime.env_cls.__name__
            raise FailedPrecondition(f"{name} is not a multi-agent environment: no worlds to join")
        elif hs.resume_token:
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
        described = self.info()
        out.info_digest = described.info_digest
        if hs.known_info_digest != described.info_digest:  # else the client holds it (RFC 0013)
            out.info.CopyFrom(described.info)
        return session, entry

    async def _dispatch(
        self,
        session: RuntimeSession | VectorSession | Seat,
        owned: list[Any],
        resp: environment_pb2.SessionResponse,
        encode: Callable[[Any], Any] | None = None,
        encoded: list[Any] | None = None,
    ) -> Any:
        item = owned.pop()  # the only reference when the caller handed it over (_answer)
        prepared: Prepared | None = None
        if isinstance(item, Prepared):
            prepared, req = item, item.request
        else:
            req = item
        del item
        kind = req.WhichOneof("kind")
        rt = self.runtime
        if isinstance(session, VectorSession):
            return await self._dispatch_vector(session, kind, req, resp)
        if isinstance(session, Seat):
            return await self._dispatch_seat(session, kind, req, resp, prepared, encode, encoded)
        if kind == "step":
            st = req.step
            if st.agent_id or st.actions:
                raise InvalidArgument("step.agent_id and step.actions are for multi-agent environments only (RFC 0012)")
            session._require_sim("step")  # UNIMPLEMENTED in tools-only mode comes before a bad payload (§3.5)
            action = prepared.action if prepared is not None else rt.action_codec.decode(st.action)
            timeout = st.timeout.ToNanoseconds() / 1e9 if st.HasField("timeout") else None
            del st, req, prepared  # decoded: the request's message goes
            before = session.status
            result = await session.step(action, timeout)
            try:
                if encode is not None and encoded is not None:
                    encoded.append(encode(result))
                else:
                    fill_time_step(resp.step.time_step, result, rt)
            except Exception as e:
                session.retract_step(before)  # an answer that cannot be sent is not a step
                raise Internal(f"the step's result cannot be encoded: {type(e).__name__}: {e}") from e
            if encode is not None:
                resp.step.SetInParent()
        elif kind == "reset":
            r = req.reset
            given = prepared.action if prepared is not None and prepared.action is not None else None
            options = with_task(rt.tasks, r.task_id, given if given is not None else from_struct(r.options))  # RFC 0004
            seed, episode_id = r.seed if r.HasField("seed") else None, r.episode_id or None
            del r, req, prepared, given  # decoded: the request's message goes
            result = await session.reset(seed, episode_id, options)
            if encode is not None and encoded is not None:
                encoded.append(encode(result))
                resp.reset.SetInParent()
            else:
                fill_time_step(resp.reset.time_step, result, rt)
        elif kind == "state":
            s = await session.state()
            if encode is not None and encoded is not None:
                encoded.append(encode(s))
                resp.state.SetInParent()
                return None
            out = resp.state
            out.episode_id, out.step_count = s.episode_id, s.step_count
            # The generated stubs type an enum field as its enum class; the field holds the number.
            out.status = cast(environment_pb2.EpisodeStatus, int(s.status))
            if s.state is not None:
                rt.state_codec.encode(s.state, out.state)
        elif kind == "list_tools":
            tools = await session.list_tools()
            if encode is not None and encoded is not None:
                encoded.append(encode(tools))
                resp.list_tools.SetInParent()
                return None
            for t in tools:
                resp.list_tools.tools.append(t.to_proto())
        elif kind == "call_tool":
            c = req.call_tool
            timeout = c.timeout.ToNanoseconds() / 1e9 if c.HasField("timeout") else None
            name = c.name
            arguments = prepared.action if prepared is not None else from_struct(c.arguments)
            del c, req, prepared  # decoded: the request's message goes
            tool_result = await session.call_tool(name, arguments, timeout)
            del arguments
            resp.call_tool.name = name
            if encode is not None and encoded is not None:  # the stream bounds the reply it builds
                encoded.append(encode(tool_result))
                resp.call_tool.SetInParent()
                return None
            limit = rt.max_message_bytes
            least = least_size((tool_result.content, tool_result.structured_content), limit)
            if least > limit:  # refused before it is built and serialized (the serializer would refuse it)
                raise ResourceExhausted(
                    f"the reply (call_tool, over {least} bytes) exceeds the {limit}-byte message limit; "
                    "the request was carried out"
                )
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
        elif kind == "observe":
            raise FailedPrecondition("observe is for multi-agent environments only (RFC 0012): use state")
        else:
            raise InvalidArgument("request has no kind set")
        return None

    async def _dispatch_seat(
        self,
        seat: Seat,
        kind: str | None,
        req: environment_pb2.SessionRequest,
        resp: environment_pb2.SessionResponse,
        prepared: Prepared | None,
        encode: Callable[[Any], Any] | None,
        encoded: list[Any] | None,
    ) -> Any:
        """A request of a multi-agent stream (RFC 0012), answered for the seat's agents."""
        rt = self.runtime
        result: StepResult[Any] | None = None
        out: environment_pb2.TimeStep | None = None
        # RFC 0016: how long this request may wait on other sessions (unset: as in 1.4).
        wait = req.wait_timeout.ToNanoseconds() / 1e9 if req.HasField("wait_timeout") else None
        if kind == "step":
            st = req.step
            has_action = prepared is not None or st.HasField("action")
            action = None
            if has_action:
                action = prepared.action if prepared is not None else rt.action_codec.decode(st.action)
            actions = {a: rt.action_codec.decode(p) for a, p in st.actions.items()}
            if not has_action and not actions:
                raise InvalidArgument("step needs an action (or, in a simultaneous world, actions keyed by agent id)")
            timeout = st.timeout.ToNanoseconds() / 1e9 if st.HasField("timeout") else None
            result = await seat.step(action, st.agent_id, actions, timeout, has_action, wait)
            out = resp.step.time_step
        elif kind == "reset":
            r = req.reset
            if r.task_id:
                raise Unimplemented("tasks are not offered for multi-agent environments in this version")
            given = prepared.action if prepared is not None else None
            options = given if given is not None else from_struct(r.options)
            result = await seat.reset(r.seed if r.HasField("seed") else None, r.episode_id or None, options, wait)
            out = resp.reset.time_step
        elif kind == "observe":
            o = req.observe
            timeout = o.timeout.ToNanoseconds() / 1e9 if o.HasField("timeout") else None
            result = await seat.observe(o.wait, timeout, wait, o.seat_events)
            out = resp.observe.time_step
        elif kind == "state":
            s = await seat.state()
            if encode is not None and encoded is not None:
                encoded.append(encode(s))
                resp.state.SetInParent()
                return None
            state_out = resp.state
            state_out.episode_id, state_out.step_count = s.episode_id, s.step_count
            state_out.status = cast(environment_pb2.EpisodeStatus, int(s.status))  # as in _dispatch
            if s.state is not None:
                rt.state_codec.encode(s.state, state_out.state)
            return None
        elif kind == "close":
            resp.close.SetInParent()
            return _CLOSE
        elif kind == "handshake":
            raise FailedPrecondition("the session is already open: handshake may only be sent once")
        elif kind == "list_tasks":
            answer_list_tasks(rt.tasks, req.list_tasks, resp.list_tasks)
            return None
        elif kind in ("batch_reset", "batch_step"):
            raise FailedPrecondition(f"{kind} needs a vectorised session; multi-agent worlds have none")
        elif kind is None:
            raise InvalidArgument("request has no kind set")
        else:
            raise Unimplemented(f"{kind} is not offered for multi-agent environments in this version (RFC 0012)")
        assert result is not None and out is not None
        if encode is not None and encoded is not None:
            encoded.append(encode(result))
            out.SetInParent()
        else:
            fill_time_step(out, result, rt)
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
