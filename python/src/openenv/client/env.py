"""The trainer's side: :class:`EnvClient` (one instance), :class:`VectorEnvClient` (N
instances, batched) and their blocking twin from ``.sync()``.

::

    async with EnvClient("grpc://127.0.0.1:50051") as env:
        r = await env.reset(seed=7)
        while not r.done:
            r = await env.step(policy(r.observation))

    with EnvClient("grpc://127.0.0.1:50051").sync() as env:   # scripts, notebooks
        r = env.reset(seed=7)

What you may rely on:

* Every request carries an id and its answer is matched by id, so a call that times
  out on the client (``timeout=``) can never shift the answers of later calls.
* Calls may be issued concurrently from several tasks (pipelining): they are sent in
  call order and answered in that order.
* Errors raise the exception class of the protocol's error table
  (:mod:`openenv.errors`), with ``.code``; ``fatal`` ones mean the session is over.
* Typed clients set ``action_type``/``observation_type``/``state_type`` (same
  declarations as :class:`openenv.Environment`) to get decoded, validated values.
* ``http(s)://`` and ``ws(s)://`` URLs speak OpenEnv's WebSocket protocol (Hugging Face
  Spaces, ``openenv serve``'s HTTP side, stock OpenEnv servers) through
  :class:`openenv.client.ws.WsConnection`, with the same API; against a stock OpenEnv
  server, whose frames carry no ids, a client-side timeout ends the session instead.
* Servers that require a token (RFC 0003, docs/security.md) get ``token=`` (default:
  ``$OPENENV_TOKEN``; for a ``*.hf.space`` URL also ``$HF_TOKEN``) as
  ``authorization: Bearer`` metadata or header; a missing or refused one raises
  :class:`openenv.Unauthenticated`. ``grpcs://``, ``https://`` and ``wss://`` use TLS,
  verified against ``ca_file=`` (default: the system's CAs); ``client_cert=(cert, key)``
  answers a server that requires client certificates (mutual TLS).
* Closing leaves nothing behind: a client closed in a loop that is then closed (one
  ``asyncio.run`` per episode) is safe.

Transports sit behind :class:`openenv.client.Connection`; pass ``connection=`` to use one
of your own.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.metadata
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self

from google.protobuf.message import Message

from openenv.client.binary import BinaryWsConnection
from openenv.client.connection import Connection
from openenv.client.grpc import GrpcConnection
from openenv.client.options import ConnectionOptions
from openenv.client.results import BatchResult
from openenv.client.sync import SyncEnvClient
from openenv.client.urls import WS_SCHEMES, is_binary_url, is_hf_space, parse_url, scheme_of
from openenv.client.ws import WsConnection
from openenv.errors import EnvError, FailedPrecondition
from openenv.protocol import PROTOCOL_VERSION, AgentStep, EpisodeStatus, SeatEvent, SessionState, StepResult
from openenv.runtime.codec import Codec, codec_for, is_ndarray, message_class, tensor_from_proto, tensor_to_proto
from openenv.runtime.rubrics import Score
from openenv.runtime.tasks import TaskInfo
from openenv.runtime.tools import CallToolAction, CallToolObservation, Tool, ToolResult
from openenv.security import TOKEN_ENV
from openenv.v1 import environment_pb2, multiagent_pb2, payload_pb2, rubric_pb2
from openenv.values import from_struct, from_value, to_struct, to_value

ENGINE_ENV = "OPENENV_ENGINE"
"""The gRPC engine of clients (and of ``openenv serve``) when none is given: grpcio or grpclib."""

if TYPE_CHECKING:
    from openenv.client.grpclib import GrpclibConnection

__all__ = [
    "AUTORESET_MODES",
    "LAUNCHERS",
    "WAIT_GRACE_S",
    "BaseEnvClient",
    "BatchResult",
    "EnvClient",
    "ToolEnvClient",
    "VectorEnvClient",
    "connect_url",
    "default_token",
]

AUTORESET_MODES = {
    "disabled": environment_pb2.AUTORESET_MODE_DISABLED,
    "next_step": environment_pb2.AUTORESET_MODE_NEXT_STEP,
    "same_step": environment_pb2.AUTORESET_MODE_SAME_STEP,
}

WAIT_GRACE_S = 5.0
"""RFC 0016: with a server that honours ``SessionRequest.wait_timeout``, a multi-agent request's
``timeout`` travels with it (the server ends a wait on other sessions then, raising
:class:`~openenv.DeadlineExceeded`); this client itself gives up this many seconds later
(:class:`~openenv.ClientTimeout`: the server did not answer)."""

_SEAT_EVENT_KINDS = {
    multiagent_pb2.SEAT_EVENT_KIND_LEFT: "left",
    multiagent_pb2.SEAT_EVENT_KIND_JOINED: "joined",
    multiagent_pb2.SEAT_EVENT_KIND_EXPIRED: "expired",
}


LAUNCHERS = "openenv.launchers"
"""The entry-point group where a deployment layer registers how to start a server and return a
client of it (``docker``: :func:`openenv.deploy.run.client_from_image`, called as
``launch(client_cls, image, **kwargs)``)."""


def launcher(name: str) -> Callable[..., Any]:
    """The launcher registered as ``name`` in the :data:`LAUNCHERS` entry points (what
    :meth:`EnvClient.from_docker_image` calls for ``"docker"``). Registration inverts the
    dependency: deployment names the client, the client never names deployment. Raises
    ``ImportError`` when none is installed."""
    for entry in importlib.metadata.entry_points(group=LAUNCHERS, name=name):
        found: Callable[..., Any] = entry.load()
        return found
    raise ImportError(
        f"no {name!r} launcher is installed (entry points {LAUNCHERS!r}): starting a server from an image "
        "needs openenv's deployment layer (pip install 'protoenv[docker]')"
    )


def default_token(url: str) -> str | None:
    """The token sent when none is given: ``$OPENENV_TOKEN``; for a Hugging Face Space,
    else ``$HF_TOKEN`` (private Spaces take it as the bearer token)."""
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and is_hf_space(url):
        token = os.environ.get("HF_TOKEN") or None
    return token


def connect_url(
    url: str,
    *,
    options: ConnectionOptions | None = None,
    max_message_bytes: int | None = None,
    keepalive_s: float | None = None,
    token: str | None = None,
    ca_file: str | None = None,
    client_cert: tuple[str, str] | None = None,
    grpc_engine: str | None = None,
) -> Connection:
    """The connection (not yet open) that speaks to ``url``: gRPC for ``grpc(s)://`` and bare
    ``host:port``; the binary WebSocket transport for ``ws(s)://`` (or ``http(s)://``) URLs whose
    path ends in ``/v1/session`` (RFC 0011); OpenEnv's WebSocket protocol for other ``http(s)://``
    and ``ws(s)://`` URLs.
    ``options``: its settings (:class:`~openenv.client.ConnectionOptions`); the other keywords
    replace their fields when given. A token that neither gives is :func:`default_token`'s.
    ``grpc_engine``: the gRPC library, ``"grpcio"`` (grpc.aio, the default) or ``"grpclib"`` (the
    grpclib extra; the same protocol); default ``$OPENENV_ENGINE``, else grpcio."""
    scheme = scheme_of(url)
    opts = (options or ConnectionOptions()).merged(
        max_message_bytes=max_message_bytes,
        keepalive_s=keepalive_s,
        token=token,
        ca_file=ca_file,
        client_cert=client_cert,
    )
    if opts.token is None:
        opts = opts.merged(token=default_token(url))
    if scheme in WS_SCHEMES and is_binary_url(url):  # the protocol itself over a WebSocket (RFC 0011)
        return BinaryWsConnection(url, options=opts)
    if scheme in WS_SCHEMES:
        return WsConnection(url, options=opts)
    engine = grpc_engine or os.environ.get(ENGINE_ENV) or "grpcio"
    if engine not in ("grpcio", "grpclib"):
        raise ValueError(f"unknown gRPC engine {engine!r}: expected grpcio or grpclib")
    connection_cls: type[GrpcConnection | GrpclibConnection] = GrpcConnection
    if engine == "grpclib":
        try:
            from openenv.client.grpclib import GrpclibConnection
        except ImportError as e:
            raise ImportError(
                f"the grpclib engine needs the grpclib extra: pip install 'protoenv[grpclib]' ({e})"
            ) from e
        connection_cls = GrpclibConnection
    return connection_cls(parse_url(url)[1], options=opts, url=url, secure=scheme == "grpcs")


class BaseEnvClient:
    """What :class:`EnvClient` and :class:`VectorEnvClient` share: the connection and its
    settings, the session's lifecycle, payload decoding, ``state``, tasks, ``.sync()``, and
    the resources the client owns.

    ``isinstance(c, BaseEnvClient)`` holds for every client of a session; a
    :class:`VectorEnvClient` is not an :class:`EnvClient` (it has no ``reset``/``step``: it
    resets and steps with ``reset_batch``/``step_batch``).

    ``connection_options``: the connection's settings (:class:`~openenv.client.ConnectionOptions`);
    the keywords ``connect_timeout``, ``max_message_bytes``, ``keepalive_s``, ``token``,
    ``ca_file`` and ``client_cert`` replace its fields when given. ``timeout``: the default
    client-side bound of every call (None: none). ``connection``: a :class:`Connection` of
    your own (not yet open) instead of the one the URL names. ``grpc_engine``: the gRPC
    library of ``grpc://`` URLs, ``"grpcio"`` (default) or ``"grpclib"`` (see :func:`connect_url`).
    """

    action_type: ClassVar[Any] = None
    observation_type: ClassVar[Any] = None
    state_type: ClassVar[Any] = None

    def __init__(
        self,
        base_url: str,
        *,
        client_name: str = "openenv-python",
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        max_message_bytes: int | None = None,
        keepalive_s: float | None = None,
        num_envs: int = 1,
        autoreset_mode: str = "disabled",
        connection: Connection | None = None,
        token: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        resume: bool = True,
        grpc_engine: str | None = None,
        connection_options: ConnectionOptions | None = None,
        join_token: str = "",
        agent_ids: Sequence[str] = (),
    ) -> None:
        if connection is None:  # else the URL only names the server (an in-process one has none)
            scheme_of(base_url)  # ValueError for a scheme no transport speaks
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        mode = AUTORESET_MODES.get(autoreset_mode)
        if mode is None:
            raise ValueError(f"autoreset_mode must be one of {sorted(AUTORESET_MODES)}, not {autoreset_mode!r}")
        self.base_url = base_url
        self.client_name, self.options = client_name, dict(options or {})
        self.timeout = timeout
        #: How this client connects (one place: the connection it opens gets these).
        self.connection_options = (connection_options or ConnectionOptions()).merged(
            connect_timeout=connect_timeout,
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        self.num_envs, self.autoreset_mode = num_envs, mode
        self.session_id = ""
        self.info: environment_pb2.EnvironmentInfo | None = None
        self._given = connection
        self._conn: Connection | None = None
        self._closed: EnvError | None = None
        self._action_codec: Codec | None = codec_for(self.action_type) if self.action_type is not None else None
        self._obs_codec: Codec | None = codec_for(self.observation_type) if self.observation_type is not None else None
        self._state_codec: Codec | None = codec_for(self.state_type) if self.state_type is not None else None
        self._classes: dict[str, type[Message]] = {}
        self.resume = resume
        # The gRPC library (connect_url); None: $OPENENV_ENGINE, else grpcio. (Not `engine`:
        # from_docker_image passes that one to the container engine.)
        self.grpc_engine = grpc_engine
        self._attach_token = ""  # a fork's token: connect() reattaches that session
        self._owned: list[tuple[Any, Callable[[], Any]]] = []
        # RFC 0012: the world to join (empty: a new one) and the agents to act for (empty: all free).
        self.join_token, self.agent_ids = join_token, tuple(agent_ids)
        #: The world of a multi-agent session (``WorldInfo``: world id, join token, this session's
        #: agents, owner); empty for a single-agent environment.
        self.world = multiagent_pb2.WorldInfo()

    # The old settings attributes, read from the options.
    @property
    def connect_timeout(self) -> float:
        return self.connection_options.connect_timeout

    @property
    def max_message_bytes(self) -> int:
        return self.connection_options.max_message_bytes

    @property
    def keepalive_s(self) -> float:
        return self.connection_options.keepalive_s

    @property
    def token(self) -> str | None:
        """The token given (None: :func:`default_token`'s, found when connecting)."""
        return self.connection_options.token

    @property
    def ca_file(self) -> str | None:
        return self.connection_options.ca_file

    @property
    def client_cert(self) -> tuple[str, str] | None:
        return self.connection_options.client_cert

    # ------------------------------------------------------------------ lifecycle

    @property
    def connection(self) -> Connection | None:
        """The open connection (None before ``connect`` and after ``close``)."""
        return self._conn

    async def connect(self) -> Self:
        """Open the connection and the session (handshake). Idempotent."""
        if self._conn is not None:
            return self
        conn = self._given or connect_url(self.base_url, options=self.connection_options, grpc_engine=self.grpc_engine)
        hs = environment_pb2.HandshakeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_name=self.client_name,
            num_envs=self.num_envs if self.num_envs > 1 else 0,
            autoreset_mode=self.autoreset_mode,
            resumable=self.resume and self.num_envs == 1,
            resume_token=self._attach_token,
        )
        to_struct(self.options, hs.options)
        if self.join_token or self.agent_ids:
            hs.world.join_token = self.join_token
            hs.world.agent_ids.extend(self.agent_ids)
        await conn.open(hs, self.connection_options.connect_timeout)
        self._conn, self._closed = conn, None
        self.session_id, self.info = conn.session_id, conn.info
        world = getattr(conn, "world", None)
        self.world = world if isinstance(world, multiagent_pb2.WorldInfo) else multiagent_pb2.WorldInfo()
        return self

    async def close(self) -> None:
        """Close the session (the server closes the environment) and the connection, then
        release what the client owns (:meth:`own`)."""
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                await conn.close()
        finally:
            self._closed = FailedPrecondition("the client is closed", fatal=True)
            await self._release()

    async def abort(self) -> None:
        """Drop the connection without a close request, as a crashed trainer would (the
        server frees the session anyway); mainly for tests of that path. What the client owns
        is released, as by :meth:`close`."""
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                await conn.abort()
        finally:
            self._closed = FailedPrecondition("the client is closed", fatal=True)
            await self._release()

    def own(self, resource: Any, close: Callable[[], Any] | None = None) -> None:
        """Make this client the owner of ``resource``: when the client closes (or aborts),
        after its session has ended, ``close()`` is called (default: the resource's
        ``aclose``, else its ``close``). Resources are released last owned first, each once,
        all of them even when one fails (the first failure is then raised). A coroutine
        function is awaited; a plain function runs in a worker thread (it may block, as
        stopping a container does). Forks (:meth:`EnvClient.fork`) own nothing."""
        if close is None:
            close = getattr(resource, "aclose", None) or getattr(resource, "close", None)
            if close is None:
                raise TypeError(f"{type(resource).__name__} has no aclose() or close(): pass close=")
        self._owned.append((resource, close))

    @property
    def resources(self) -> tuple[Any, ...]:
        """What the client owns and has not released yet (:meth:`own`), oldest first."""
        return tuple(r for r, _ in self._owned)

    async def _release(self) -> None:
        first: BaseException | None = None
        while self._owned:
            _, close = self._owned.pop()
            try:
                if inspect.iscoroutinefunction(close):
                    await close()
                else:
                    result = await asyncio.to_thread(close)
                    if inspect.isawaitable(result):
                        await result
            except BaseException as e:  # noqa: BLE001 - the others are still released; the first is raised
                first = first or e
        if first is not None:
            raise first

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def sync(self) -> SyncEnvClient:
        """A blocking view of this client, for plain scripts and notebooks."""
        return SyncEnvClient(self)

    @classmethod
    def from_docker_image(cls, image: str, **kwargs: Any) -> Any:
        """Start IMAGE in a hardened container and return a client of it that owns it.

        Blocks until the server is SERVING; closing the client removes the container.
        Container keywords (``network_none``, ``ready_timeout``, ``env``, ``memory``,
        ``pids_limit``, ...) are those of :func:`openenv.deploy.run.start_container`; the
        others go to the constructor. Needs the ``docker`` extra.
        ``async with EchoEnv.from_docker_image("openenv-echo-env:0.1.0") as env:``

        The container is the deployment layer's business: this is a thin entry point to the
        launcher it registers (:func:`launcher`), so the client never imports deployment.
        """
        return launcher("docker")(cls, image, **kwargs)

    # ------------------------------------------------------------------ wire

    async def _request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        conn = self._conn
        if conn is None:
            raise self._closed or FailedPrecondition("not connected: use `async with` or await connect()")
        timeout = self.timeout if timeout is None else timeout
        if timeout is not None and self._waits_on_server(req):
            # RFC 0016: the wait travels with the request, so the server ends it (DEADLINE_EXCEEDED,
            # nothing changed) and the session stays usable; this side gives up a grace later.
            req.wait_timeout.FromNanoseconds(int(timeout * 1e9))
            timeout += WAIT_GRACE_S
        resp = await conn.request(req, timeout)
        if resp.WhichOneof("kind") == "error":
            raise EnvError.from_proto(resp.error)
        return resp

    def _waits_on_server(self, req: environment_pb2.SessionRequest) -> bool:
        """Whether ``req`` may wait on other sessions of a world whose server honours
        ``SessionRequest.wait_timeout`` (RFC 0016)."""
        info = self.info
        return (
            info is not None
            and info.capabilities.world_wait_timeouts
            and req.WhichOneof("kind") in ("observe", "step", "reset")
        )

    # ------------------------------------------------------------------ payloads

    def encode_action(self, action: Any, out: payload_pb2.Payload) -> None:
        """Encode an action (override in typed clients for custom conversions)."""
        if self._action_codec is not None:
            self._action_codec.encode(action, out)
        elif isinstance(action, Message):
            out.message.Pack(action)
        elif hasattr(action, "__openenv_proto__"):
            out.message.Pack(action.to_proto())
        elif is_ndarray(action):
            tensor_to_proto(action, out.tensor)
        else:
            to_value(action, out.json)

    def _decode(self, payload: payload_pb2.Payload, codec: Codec | None) -> Any:
        if codec is not None:
            return codec.decode(payload)
        kind = payload.WhichOneof("kind")
        if kind == "json":
            return from_value(payload.json)
        if kind == "tensor":
            return tensor_from_proto(payload.tensor)
        if kind == "message":
            name = payload.message.type_url.rsplit("/", 1)[-1]
            cls = self._classes.get(name)
            if cls is None:
                assert self.info is not None
                cls = self._classes[name] = message_class(self.info.descriptors, name)
            msg = cls()
            payload.message.Unpack(msg)
            return msg
        return None

    def parse_result(self, ts: environment_pb2.TimeStep) -> StepResult[Any]:
        """Decode a TimeStep (override in typed clients to shape the observation)."""
        result = self._parse_flat(ts)
        for agent, a in ts.agents.items():  # RFC 0012: the views of this session's agents
            result.agents[agent] = AgentStep(
                observation=self._decode(a.observation, self._obs_codec) if a.HasField("observation") else None,
                reward=a.reward if a.HasField("reward") else None,
                terminated=a.terminated,
                truncated=a.truncated,
                metadata=from_struct(a.metadata),
                reward_breakdown=Score.from_proto(a.reward_breakdown) if a.HasField("reward_breakdown") else None,
            )
        result.to_act = list(ts.to_act)
        result.seat_events = [  # RFC 0016
            SeatEvent(
                _SEAT_EVENT_KINDS.get(e.kind, "unspecified"),
                list(e.agent_ids),
                e.rejoin_within.ToNanoseconds() / 1e9 if e.HasField("rejoin_within") else None,
            )
            for e in ts.seat_events
        ]
        return result

    def _parse_flat(self, ts: environment_pb2.TimeStep) -> StepResult[Any]:
        return StepResult(
            observation=self._decode(ts.observation, self._obs_codec) if ts.HasField("observation") else None,
            reward=ts.reward if ts.HasField("reward") else None,
            terminated=ts.terminated,
            truncated=ts.truncated,
            metadata=from_struct(ts.metadata),
            reward_breakdown=Score.from_proto(ts.reward_breakdown) if ts.HasField("reward_breakdown") else None,
            episode_id=ts.episode_id,
            step_count=ts.step_count,
        )

    # ------------------------------------------------------------------ API shared by both

    async def state(self, *, env_id: int = 0, timeout: float | None = None) -> SessionState:
        """Episode id, step count, episode status and the environment-specific state
        (of instance ``env_id`` in a vectorised session)."""
        resp = (
            await self._request(
                environment_pb2.SessionRequest(state=environment_pb2.StateRequest(env_id=env_id)), timeout
            )
        ).state
        st = self._decode(resp.state, self._state_codec) if resp.HasField("state") else None
        return SessionState(resp.episode_id, resp.step_count, EpisodeStatus(resp.status), st)

    @property
    def task_splits(self) -> dict[str, int]:
        """The environment's task splits (RFC 0004), name -> size, the default first; empty
        when it declares no tasks."""
        return {} if self.info is None else {s.name: s.size for s in self.info.task_splits}

    async def list_tasks(
        self, split: str | None = None, *, limit: int | None = None, timeout: float | None = None
    ) -> list[TaskInfo]:
        """The tasks of ``split`` (default: the first split), in the environment's order, at
        most ``limit`` of them (all by default: pages are fetched until the end)."""
        out: list[TaskInfo] = []
        offset = 0
        while limit is None or len(out) < limit:
            req = environment_pb2.SessionRequest()
            req.list_tasks.split, req.list_tasks.offset = split or "", offset
            if limit is not None:
                req.list_tasks.limit = limit - len(out)
            page = (await self._request(req, timeout)).list_tasks
            out.extend(TaskInfo.from_proto(t) for t in page.tasks)
            if not page.tasks or page.next_offset >= page.total:
                break
            offset = page.next_offset
        return out

    @property
    def rubric(self) -> rubric_pb2.RubricSpec | None:
        """The environment's rubric spec, when it declares one."""
        return self.info.rubric if self.info is not None and self.info.HasField("rubric") else None

    # ------------------------------------------------------------------ batches (RFC 0002)

    async def _reset_batch(
        self,
        env_ids: Sequence[int],
        seeds: Sequence[int],
        options: Mapping[str, Any] | None,
        task_ids: Sequence[str],
        timeout: float | None,
    ) -> BatchResult:
        req = environment_pb2.SessionRequest()
        br = req.batch_reset
        br.env_ids.extend(env_ids)
        br.seeds.extend(seeds)
        br.task_ids.extend(task_ids)
        if options:
            to_struct(options, br.options)
        out = (await self._request(req, timeout)).batch_reset
        return BatchResult(list(out.env_ids), [self.parse_result(ts) for ts in out.time_steps], {})

    async def _step_batch(
        self, actions: Sequence[Any], env_ids: Sequence[int], timeout: float | None, step_timeout: float | None
    ) -> BatchResult:
        req = environment_pb2.SessionRequest()
        bs = req.batch_step
        bs.env_ids.extend(env_ids)
        for a in actions:
            self.encode_action(a, bs.actions.add())
        if step_timeout is not None:
            bs.timeout.FromNanoseconds(int(step_timeout * 1e9))
        out = (await self._request(req, timeout)).batch_step
        finals = {i: self.parse_result(ts) for i, ts in out.final_time_steps.items()}
        return BatchResult(list(out.env_ids), [self.parse_result(ts) for ts in out.time_steps], finals)


class EnvClient(BaseEnvClient):
    """An async session with one environment server (one environment instance).

    ``num_envs > 1`` opens a vectorised session (kept for compatibility:
    :class:`VectorEnvClient` is the way to ask for one). The keywords are
    :class:`BaseEnvClient`'s.
    """

    # ------------------------------------------------------------------ API

    async def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        task_id: str | None = None,
        timeout: float | None = None,
    ) -> StepResult[Any]:
        """Start a new episode and return its first time step. ``task_id`` (RFC 0004) names one
        of the environment's tasks (:meth:`list_tasks`); unknown ids raise ``NotFound``."""
        req = environment_pb2.SessionRequest(
            reset=environment_pb2.ResetRequest(episode_id=episode_id or "", task_id=task_id or "")
        )
        if seed is not None:
            req.reset.seed = seed
        if options:
            to_struct(options, req.reset.options)
        return self.parse_result((await self._request(req, timeout)).reset.time_step)

    async def step(
        self,
        action: Any,
        *,
        timeout: float | None = None,
        step_timeout: float | None = None,
        agent_id: str | None = None,
    ) -> StepResult[Any]:
        """Apply an action. ``timeout`` bounds the wait here; ``step_timeout`` asks the
        server to stop waiting for the environment (DEADLINE_EXCEEDED, episode aborted).

        Multi-agent (RFC 0012): ``agent_id`` names the agent that acts (one this session acts
        for); None: this session's agent to act now. In a simultaneous world, this is that
        agent's part of the joint action: the call returns once the world stepped."""
        req = environment_pb2.SessionRequest()
        st = req.step
        self.encode_action(action, st.action)
        if agent_id:
            st.agent_id = agent_id
        if step_timeout is not None:
            st.timeout.FromNanoseconds(int(step_timeout * 1e9))
        return self.parse_result((await self._request(req, timeout)).step.time_step)

    async def step_agents(
        self, actions: Mapping[str, Any], *, timeout: float | None = None, step_timeout: float | None = None
    ) -> StepResult[Any]:
        """Multi-agent, simultaneous worlds (RFC 0012): one action per agent of this session that
        is to act (agent id -> action). Returns once the world stepped (every agent to act, of
        every session, has an action); ``step_timeout`` bounds the wait for the others on the
        server (DEADLINE_EXCEEDED, this session's actions withdrawn)."""
        req = environment_pb2.SessionRequest()
        st = req.step
        for agent, action in actions.items():
            self.encode_action(action, st.actions[agent])
        if step_timeout is not None:
            st.timeout.FromNanoseconds(int(step_timeout * 1e9))
        return self.parse_result((await self._request(req, timeout)).step.time_step)

    async def observe(
        self,
        *,
        wait: bool = False,
        wait_timeout: float | None = None,
        timeout: float | None = None,
        seat_events: bool = False,
    ) -> StepResult[Any]:
        """Multi-agent (RFC 0012): the current time step of this session's agents. ``wait``:
        once one of them is to act, the episode ended, or a new episode started, that this
        session has not seen (``wait_timeout`` bounds it on the server: DEADLINE_EXCEEDED);
        with ``seat_events`` also once another session left or joined the world, or a rejoin
        deadline passed (RFC 0016: ``StepResult.seat_events`` says which).

        ``timeout`` bounds the call; against a server that honours wait deadlines (RFC 0016,
        ``Capabilities.world_wait_timeouts``) it travels with the request too, so the server
        ends the wait then (:class:`~openenv.DeadlineExceeded`, the session usable at once), and
        :class:`~openenv.ClientTimeout` means the server did not answer ``WAIT_GRACE_S`` later.
        The same holds for ``step``/``step_agents`` (a simultaneous step's actions withdrawn)
        and a joining session's ``reset``."""
        req = environment_pb2.SessionRequest(observe=environment_pb2.ObserveRequest(wait=wait))
        if wait_timeout is not None:
            req.observe.timeout.FromNanoseconds(int(wait_timeout * 1e9))
        if seat_events:
            req.observe.seat_events = True
        return self.parse_result((await self._request(req, timeout)).observe.time_step)

    @property
    def multi_agent(self) -> multiagent_pb2.MultiAgentSpec | None:
        """How the agents of a multi-agent environment play (RFC 0012), None for a single-agent one."""
        return self.info.multi_agent if self.info is not None and self.info.HasField("multi_agent") else None

    async def list_tools(self, *, timeout: float | None = None) -> list[Tool]:
        """The environment's tools."""
        resp = await self._request(environment_pb2.SessionRequest(list_tools={}), timeout)
        return [Tool.from_proto(t) for t in resp.list_tools.tools]

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        tool_timeout: float | None = None,
    ) -> ToolResult:
        """Call a tool outside the step loop (no step counted, no reward)."""
        req = environment_pb2.SessionRequest(call_tool={"name": name})
        if arguments:
            to_struct(arguments, req.call_tool.arguments)
        if tool_timeout is not None:
            req.call_tool.timeout.FromNanoseconds(int(tool_timeout * 1e9))
        return ToolResult.from_proto((await self._request(req, timeout)).call_tool.result)

    async def reset_batch(
        self,
        env_ids: Sequence[int] = (),
        seeds: Sequence[int] = (),
        options: Mapping[str, Any] | None = None,
        *,
        task_ids: Sequence[str] = (),
        timeout: float | None = None,
    ) -> BatchResult:
        """:meth:`VectorEnvClient.reset_batch`, for a client made with ``num_envs > 1``."""
        return await self._reset_batch(env_ids, seeds, options, task_ids, timeout)

    async def step_batch(
        self,
        actions: Sequence[Any],
        env_ids: Sequence[int] = (),
        *,
        timeout: float | None = None,
        step_timeout: float | None = None,
    ) -> BatchResult:
        """:meth:`VectorEnvClient.step_batch`, for a client made with ``num_envs > 1``."""
        return await self._step_batch(actions, env_ids, timeout, step_timeout)

    # ------------------------------------------------------------------ snapshots (RFC 0006)

    async def snapshot(self, *, timeout: float | None = None) -> environment_pb2.Snapshot:
        """The session's state now, as an opaque ``openenv.v1.Snapshot`` (environment name and
        version, episode id, step count, status; the rest is sealed by the server). Pass it to
        :meth:`restore` or :meth:`fork` of a session of the same environment and version; it
        serializes with ``SerializeToString()``. ``UNIMPLEMENTED`` when the environment does
        not offer snapshots (``info.capabilities.snapshots``)."""
        req = environment_pb2.SessionRequest(snapshot=environment_pb2.SnapshotRequest())
        return (await self._request(req, timeout)).snapshot.snapshot

    async def restore(self, snapshot: environment_pb2.Snapshot, *, timeout: float | None = None) -> SessionState:
        """Make this session's state the snapshot's: the episode continues from the step it
        was taken at. Returns the restored episode id, step count and status (no environment
        state: call :meth:`state` for it). A snapshot of another environment or version is
        ``FAILED_PRECONDITION``, an altered one ``INVALID_ARGUMENT``; neither changes anything."""
        req = environment_pb2.SessionRequest(restore=environment_pb2.RestoreRequest(snapshot=snapshot))
        out = (await self._request(req, timeout)).restore
        return SessionState(out.episode_id, out.step_count, EpisodeStatus(out.status), None)

    async def fork(
        self, n: int = 1, *, snapshot: environment_pb2.Snapshot | None = None, timeout: float | None = None
    ) -> list[EnvClient]:
        """``n`` new sessions starting from this session's state now (or from ``snapshot``),
        each a connected client of the same class and settings; close them when done. They are
        independent of each other and of this one: a GRPO group's rollouts from one start::

            forks = await env.fork(8)
            results = await asyncio.gather(*(rollout(f) for f in forks))
        """
        req = environment_pb2.SessionRequest(fork=environment_pb2.ForkRequest(count=n))
        if snapshot is not None:
            req.fork.snapshot.CopyFrom(snapshot)
        out = (await self._request(req, timeout)).fork
        forks: list[EnvClient] = []
        try:
            for token in out.resume_tokens:
                forks.append(await self._sibling(token).connect())
        except BaseException:
            for f in forks:
                await f.close()
            raise
        return forks

    def _sibling(self, token: str) -> EnvClient:
        """A client like this one (class, URL, settings) that attaches the session of ``token``,
        over a new connection of the same kind as this one's (its ``sibling()``, when it has
        one), else the one the URL names. It owns nothing."""
        other = copy.copy(self)
        make = getattr(self._conn, "sibling", None)
        other._given = make() if make is not None else None
        other._conn, other._closed, other._owned = None, None, []
        other.session_id, other.info, other._classes = "", None, {}
        other._attach_token = token
        return other


class VectorEnvClient(BaseEnvClient):
    """A vectorised session: ``num_envs`` instances stepped with one message each way
    (RFC 0002), for classic RL. ``reset_batch``/``step_batch`` return a
    :class:`BatchResult`; ``state(env_id=k)`` reads instance k. Autoreset follows
    Gymnasium's modes (``"next_step"`` by default, ``"same_step"``, ``"disabled"``).

    A sibling of :class:`EnvClient` (both are :class:`BaseEnvClient`\\ s), not a kind of it: it
    has no ``reset``/``step``/tools/snapshots, which a vectorised session does not offer.
    The other keywords are :class:`BaseEnvClient`'s.
    """

    def __init__(self, base_url: str, num_envs: int, *, autoreset_mode: str = "next_step", **kwargs: Any) -> None:
        if num_envs < 2:
            raise ValueError("a VectorEnvClient needs num_envs >= 2 (use EnvClient for one instance)")
        super().__init__(base_url, num_envs=num_envs, autoreset_mode=autoreset_mode, **kwargs)

    async def reset_batch(
        self,
        env_ids: Sequence[int] = (),
        seeds: Sequence[int] = (),
        options: Mapping[str, Any] | None = None,
        *,
        task_ids: Sequence[str] = (),
        timeout: float | None = None,
    ) -> BatchResult:
        """Reset instances (all by default).

        ``seeds``: none (unseeded), one ``s`` (instance k gets ``s + k``), or one per instance.
        ``task_ids`` (RFC 0004): none, one shared by every instance (a GRPO group), or one each."""
        return await self._reset_batch(env_ids, seeds, options, task_ids, timeout)

    async def step_batch(
        self,
        actions: Sequence[Any],
        env_ids: Sequence[int] = (),
        *,
        timeout: float | None = None,
        step_timeout: float | None = None,
    ) -> BatchResult:
        """Step instances with one action each (all by default, in
        id order). With ``autoreset_mode="same_step"``, ``final`` holds the ending time
        steps of episodes that ended (their slot in ``results`` is the new episode's start)."""
        return await self._step_batch(actions, env_ids, timeout, step_timeout)


class ToolEnvClient(EnvClient):
    """Client of a tool environment (one that declares tools and no ``step``): actions are
    :class:`openenv.CallToolAction`, observations :class:`openenv.CallToolObservation`
    whose ``.metadata`` is the time step's metadata (as in OpenEnv's ``MCPToolClient``)."""

    action_type = CallToolAction
    observation_type = CallToolObservation

    def parse_result(self, ts: environment_pb2.TimeStep) -> StepResult[Any]:
        result = super().parse_result(ts)
        if result.observation is None:
            result.observation = CallToolObservation()
        result.observation.metadata = result.metadata
        return result
