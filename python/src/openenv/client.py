"""The trainer's side: :class:`EnvClient` (async) and its blocking twin from ``.sync()``.

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
  :mod:`openenv.transport_ws`, with the same API; against a stock OpenEnv server, whose
  frames carry no ids, a client-side timeout ends the session instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlparse

import grpc
import numpy as np
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from openenv.codec import (
    Codec,
    codec_for,
    from_value,
    message_class,
    tensor_from_proto,
    tensor_to_proto,
    to_struct,
    to_value,
)
from openenv.environment import StepResult
from openenv.errors import (
    DeadlineExceeded,
    EnvError,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
)
from openenv.rubrics import Score
from openenv.session import PROTOCOL_VERSION, EpisodeStatus, SessionState
from openenv.tools import CallToolAction, CallToolObservation, Tool, ToolResult
from openenv.v1 import environment_pb2, environment_pb2_grpc, payload_pb2, rubric_pb2

__all__ = ["BatchResult", "EnvClient", "SessionState", "SyncEnvClient", "ToolEnvClient"]

_DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024
_WS_SCHEMES = ("http", "https", "ws", "wss")
_END_GRACE_S = 5.0  # how long closing waits for the server to end the stream before cancelling it


def parse_url(url: str) -> tuple[str, str]:
    """(scheme, target) of an environment URL: ``grpc://host:port`` or ``host:port``."""
    if "://" not in url:
        return "grpc", url
    u = urlparse(url)
    if not u.hostname or not u.port:
        raise ValueError(f"environment URL {url!r} needs a host and a port")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return u.scheme, f"{host}:{u.port}"


async def _channel_ready(channel: grpc.aio.Channel, timeout: float) -> bool:
    """Wait until ``channel`` is connected; on timeout close it and return False.

    The pending connectivity watch is not cancelled but resolved by closing the channel,
    and awaited: a watch merely cancelled would complete later, on a loop that may be gone."""
    ready = asyncio.ensure_future(channel.channel_ready())
    try:
        done, _ = await asyncio.wait({ready}, timeout=timeout)
    except BaseException:
        ready.cancel()
        await channel.close()
        raise
    if done:
        ready.result()
        return True
    await channel.close()  # the channel goes to SHUTDOWN, which resolves the watch
    await asyncio.wait({ready}, timeout=_END_GRACE_S)
    if ready.done():
        ready.cancelled() or ready.exception()  # retrieved: closing the channel ends it with an error
    else:
        ready.cancel()
    return False


def _error_from_status(st: Any) -> EnvError:
    details = None
    if st.details:
        vals = []
        for d in st.details:
            v = struct_pb2.Value()
            vals.append(from_value(v) if d.Unpack(v) else {"@type": d.type_url})
        details = vals[0] if len(vals) == 1 else vals
    return EnvError.from_code(st.code, st.message, details=details, fatal=st.fatal)


class EnvClient:
    """An async session with one environment server (one environment instance)."""

    action_type: ClassVar[Any] = None
    observation_type: ClassVar[Any] = None
    state_type: ClassVar[Any] = None

    def __init__(self, base_url: str, *, client_name: str = "openenv-python",
                 options: Mapping[str, Any] | None = None, timeout: float | None = None,
                 connect_timeout: float = 30.0, max_message_bytes: int = _DEFAULT_MAX_MESSAGE,
                 keepalive_s: float = 30.0, num_envs: int = 1, autoreset_mode: str = "disabled") -> None:
        scheme = base_url.split("://", 1)[0].lower() if "://" in base_url else "grpc"
        if scheme not in ("grpc", *_WS_SCHEMES):
            raise ValueError(f"unsupported URL scheme {scheme!r} in {base_url!r} "
                             "(use grpc://host:port, or http(s)://, ws(s):// for OpenEnv's WebSocket protocol)")
        target = "" if scheme in _WS_SCHEMES else parse_url(base_url)[1]
        # Transport: gRPC for grpc:// and host:port; openenv.transport_ws for http(s)/ws(s) URLs.
        self._ws: Any = None
        self._scheme = scheme
        self.base_url, self._target = base_url, target
        self.client_name, self.options = client_name, dict(options or {})
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.max_message_bytes, self.keepalive_s = max_message_bytes, keepalive_s
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        mode = _AUTORESET_MODES.get(autoreset_mode)
        if mode is None:
            raise ValueError(f"autoreset_mode must be one of {sorted(_AUTORESET_MODES)}, not {autoreset_mode!r}")
        self.num_envs, self.autoreset_mode = num_envs, mode
        self.session_id = ""
        self.info: environment_pb2.EnvironmentInfo | None = None
        self._channel: grpc.aio.Channel | None = None
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[environment_pb2.SessionResponse]] = {}
        self._next_id = 0
        self._broken: EnvError | None = None
        self._write_lock: asyncio.Lock | None = None
        self._action_codec: Codec | None = codec_for(self.action_type) if self.action_type is not None else None
        self._obs_codec: Codec | None = (codec_for(self.observation_type)
                                         if self.observation_type is not None else None)
        self._state_codec: Codec | None = codec_for(self.state_type) if self.state_type is not None else None
        self._classes: dict[str, type[Message]] = {}
        self._server_limit = 0

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> EnvClient:
        """Open the channel and the session (handshake). Idempotent."""
        if self._call is not None or self._ws is not None:
            return self
        if self._scheme in _WS_SCHEMES:
            return await self._connect_ws()
        opts = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        self._channel = grpc.aio.insecure_channel(self._target, options=opts)
        if not await _channel_ready(self._channel, self.connect_timeout):
            self._channel = None
            raise Unavailable(f"cannot connect to {self.base_url} within {self.connect_timeout:g} s",
                              fatal=True) from None
        self._write_lock = asyncio.Lock()
        self._call = environment_pb2_grpc.EnvironmentServiceStub(self._channel).Session()
        self._reader = asyncio.ensure_future(self._read_loop())
        hs = environment_pb2.SessionRequest(handshake=environment_pb2.HandshakeRequest(
            protocol_version=PROTOCOL_VERSION, client_name=self.client_name,
            num_envs=self.num_envs if self.num_envs > 1 else 0, autoreset_mode=self.autoreset_mode))
        to_struct(self.options, hs.handshake.options)
        try:
            resp = await self._request(hs, self.connect_timeout)
        except EnvError:
            await self._shutdown(graceful=True)  # a refused handshake: the server ends the stream
            raise
        except BaseException:
            await self._shutdown()
            raise
        self.session_id = resp.handshake.session_id
        self.info = resp.handshake.info
        self._server_limit = self.info.capabilities.max_message_bytes
        return self

    async def _connect_ws(self) -> EnvClient:
        from openenv.transport_ws import WsTransport

        if self.num_envs > 1:
            raise ValueError("num_envs > 1 (a vector session) needs a grpc:// URL")
        ws = WsTransport(self.base_url, client_name=self.client_name, options=self.options,
                         connect_timeout=self.connect_timeout, max_message_bytes=self.max_message_bytes,
                         keepalive_s=self.keepalive_s)
        self.session_id, self.info = await ws.connect()
        self._ws = ws
        self._server_limit = self.info.capabilities.max_message_bytes
        return self

    async def close(self) -> None:
        """Close the session (the server closes the environment) and the channel."""
        if self._ws is not None:
            ws, self._ws = self._ws, None
            await ws.close()
            self._broken = self._broken or FailedPrecondition("the client is closed", fatal=True)
            return
        if self._call is not None and self._broken is None:
            try:
                await self._request(environment_pb2.SessionRequest(close=environment_pb2.CloseRequest()), 10.0)
            except EnvError:
                pass
        await self._shutdown(graceful=True)

    async def _shutdown(self, graceful: bool = False) -> None:
        """End the stream and close the channel. ``graceful``: half-close and let the
        server end the stream (it does on a close request, a fatal error or end of input),
        so that every gRPC operation of the call completes on this loop before it returns;
        a call cancelled instead still owes its loop completions, and a loop closed right
        after (``asyncio.run`` per episode) would get them as "Event loop is closed" errors
        in whichever loop reads gRPC's queue next. Falls back to cancelling after a bound."""
        call, reader = self._call, self._reader
        if graceful and call is not None and reader is not None and not reader.done():
            with contextlib.suppress(Exception):  # the stream may already be over
                await asyncio.wait_for(call.done_writing(), _END_GRACE_S)
            await asyncio.wait({reader}, timeout=_END_GRACE_S)
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
        self._call = self._reader = self._channel = None
        if self._broken is None:
            self._broken = FailedPrecondition("the client is closed", fatal=True)

    async def __aenter__(self) -> EnvClient:
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
        ``pids_limit``, ...) are those of :func:`openenv.images.start_container`; the others
        go to the constructor. ``async with EchoEnv.from_docker_image("openenv-echo-env:0.1.0") as env:``
        """
        from openenv.images import client_from_image

        return client_from_image(cls, image, **kwargs)

    # ------------------------------------------------------------------ wire

    async def _read_loop(self) -> None:
        err: EnvError | None = None
        try:
            while True:
                resp = await self._call.read()
                if resp is grpc.aio.EOF:
                    break
                fut = self._pending.pop(resp.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
            code = await self._call.code()
            if code is not grpc.StatusCode.OK:
                err = EnvError.from_code(code.value[0], await self._call.details() or code.name, fatal=True)
        except grpc.aio.AioRpcError as e:
            err = EnvError.from_code(e.code().value[0], e.details() or e.code().name, fatal=True)
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
        finally:
            self._broken = err or FailedPrecondition("the session has ended", fatal=True)
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(self._broken)
            self._pending.clear()

    async def _request(self, req: environment_pb2.SessionRequest,
                       timeout: float | None = None) -> environment_pb2.SessionResponse:
        if self._ws is not None:
            return await self._ws.request(req, self.timeout if timeout is None else timeout)
        if self._broken is not None:
            raise self._broken
        if self._call is None:
            raise FailedPrecondition("not connected: use `async with` or await connect()")
        size = req.ByteSize()
        limit = min(self.max_message_bytes, self._server_limit or self.max_message_bytes)
        if size > limit:
            raise ResourceExhausted(f"request of {size} bytes exceeds the {limit}-byte message limit")
        self._next_id += 1
        rid = req.request_id = self._next_id
        fut: asyncio.Future[environment_pb2.SessionResponse] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            async with self._write_lock:  # type: ignore[union-attr]
                await self._call.write(req)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            self._pending.pop(rid, None)
            if self._broken is None and self._reader is not None:
                # The server ended the stream and the reader has not read its status yet: that
                # status (e.g. DEADLINE_EXCEEDED of the idle reaper) is the answer, not this write.
                await asyncio.wait({self._reader}, timeout=_END_GRACE_S)
            if self._broken is not None:
                raise self._broken from None
            raise Unavailable(f"session stream failed: {e}", fatal=True) from e
        timeout = self.timeout if timeout is None else timeout
        try:
            resp = await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except TimeoutError:
            self._pending.pop(rid, None)  # its late answer will be matched and discarded
            raise DeadlineExceeded(f"no answer within {timeout:g} s (client-side timeout)") from None
        if resp.WhichOneof("kind") == "error":
            raise _error_from_status(resp.error)
        return resp

    # ------------------------------------------------------------------ payloads

    def encode_action(self, action: Any, out: payload_pb2.Payload) -> None:
        """Encode an action (override in typed clients for custom conversions)."""
        if self._action_codec is not None:
            self._action_codec.encode(action, out)
        elif isinstance(action, Message):
            out.message.Pack(action)
        elif hasattr(action, "__openenv_proto__"):
            out.message.Pack(action.to_proto())
        elif isinstance(action, np.ndarray):
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
                cls = self._classes[name] = message_class(self.info.descriptors, name)  # type: ignore[union-attr]
            msg = cls()
            payload.message.Unpack(msg)
            return msg
        return None

    def parse_result(self, ts: environment_pb2.TimeStep) -> StepResult:
        """Decode a TimeStep (override in typed clients to shape the observation)."""
        return StepResult(
            observation=self._decode(ts.observation, self._obs_codec) if ts.HasField("observation") else None,
            reward=ts.reward if ts.HasField("reward") else None,
            terminated=ts.terminated, truncated=ts.truncated,
            metadata={k: from_value(v) for k, v in ts.metadata.fields.items()},
            reward_breakdown=Score.from_proto(ts.reward_breakdown) if ts.HasField("reward_breakdown") else None,
            episode_id=ts.episode_id, step_count=ts.step_count)

    # ------------------------------------------------------------------ API

    async def reset(self, seed: int | None = None, episode_id: str | None = None,
                    options: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> StepResult:
        """Start a new episode and return its first time step."""
        req = environment_pb2.SessionRequest(reset=environment_pb2.ResetRequest(episode_id=episode_id or ""))
        if seed is not None:
            req.reset.seed = seed
        if options:
            to_struct(options, req.reset.options)
        return self.parse_result((await self._request(req, timeout)).reset.time_step)

    async def step(self, action: Any, *, timeout: float | None = None,
                   step_timeout: float | None = None) -> StepResult:
        """Apply an action. ``timeout`` bounds the wait here; ``step_timeout`` asks the
        server to stop waiting for the environment (DEADLINE_EXCEEDED, episode aborted)."""
        req = environment_pb2.SessionRequest()
        st = req.step
        self.encode_action(action, st.action)
        if step_timeout is not None:
            st.timeout.FromNanoseconds(int(step_timeout * 1e9))
        return self.parse_result((await self._request(req, timeout)).step.time_step)

    async def state(self, *, env_id: int = 0, timeout: float | None = None) -> SessionState:
        """Episode id, step count, episode status and the environment-specific state
        (of instance ``env_id`` in a vectorised session)."""
        resp = (await self._request(environment_pb2.SessionRequest(
            state=environment_pb2.StateRequest(env_id=env_id)), timeout)).state
        st = self._decode(resp.state, self._state_codec) if resp.HasField("state") else None
        return SessionState(resp.episode_id, resp.step_count, EpisodeStatus(resp.status), st)

    async def list_tools(self, *, timeout: float | None = None) -> list[Tool]:
        """The environment's tools."""
        resp = await self._request(environment_pb2.SessionRequest(list_tools={}), timeout)
        return [Tool.from_proto(t) for t in resp.list_tools.tools]

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                        timeout: float | None = None, tool_timeout: float | None = None) -> ToolResult:
        """Call a tool outside the step loop (no step counted, no reward)."""
        req = environment_pb2.SessionRequest(call_tool={"name": name})
        if arguments:
            to_struct(arguments, req.call_tool.arguments)
        if tool_timeout is not None:
            req.call_tool.timeout.FromNanoseconds(int(tool_timeout * 1e9))
        return ToolResult.from_proto((await self._request(req, timeout)).call_tool.result)

    async def reset_batch(self, env_ids: Sequence[int] = (), seeds: Sequence[int] = (),
                          options: Mapping[str, Any] | None = None, *,
                          timeout: float | None = None) -> BatchResult:
        """Reset instances of a vectorised session (``num_envs > 1``); all by default.

        ``seeds``: none (unseeded), one ``s`` (instance k gets ``s + k``), or one per instance."""
        req = environment_pb2.SessionRequest()
        br = req.batch_reset
        br.env_ids.extend(env_ids)
        br.seeds.extend(seeds)
        if options:
            to_struct(options, br.options)
        out = (await self._request(req, timeout)).batch_reset
        return BatchResult(list(out.env_ids), [self.parse_result(ts) for ts in out.time_steps], {})

    async def step_batch(self, actions: Sequence[Any], env_ids: Sequence[int] = (), *,
                         timeout: float | None = None, step_timeout: float | None = None) -> BatchResult:
        """Step instances of a vectorised session with one action each (all by default, in
        id order). With ``autoreset_mode="same_step"``, ``final`` holds the ending time
        steps of episodes that ended (their slot in ``results`` is the new episode's start)."""
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

    @property
    def rubric(self) -> rubric_pb2.RubricSpec | None:
        """The environment's rubric spec, when it declares one."""
        return self.info.rubric if self.info is not None and self.info.HasField("rubric") else None


class ToolEnvClient(EnvClient):
    """Client of a tool environment (one that declares tools and no ``step``): actions are
    :class:`openenv.CallToolAction`, observations :class:`openenv.CallToolObservation`
    whose ``.metadata`` is the time step's metadata (as in OpenEnv's ``MCPToolClient``)."""

    action_type = CallToolAction
    observation_type = CallToolObservation

    def parse_result(self, ts: environment_pb2.TimeStep) -> StepResult:
        result = super().parse_result(ts)
        if result.observation is None:
            result.observation = CallToolObservation()
        result.observation.metadata = result.metadata
        return result


_AUTORESET_MODES = {
    "disabled": environment_pb2.AUTORESET_MODE_DISABLED,
    "next_step": environment_pb2.AUTORESET_MODE_NEXT_STEP,
    "same_step": environment_pb2.AUTORESET_MODE_SAME_STEP,
}


@dataclasses.dataclass
class BatchResult:
    """Results of a batch reset/step: one :class:`StepResult` per stepped instance."""

    env_ids: list[int]
    results: list[StepResult]
    final: dict[int, StepResult]

    @property
    def observations(self) -> list[Any]:
        return [r.observation for r in self.results]

    @property
    def rewards(self) -> np.ndarray:
        """Rewards as float64 (NaN where a step had no reward)."""
        return np.array([np.nan if r.reward is None else r.reward for r in self.results], dtype=np.float64)

    @property
    def terminated(self) -> np.ndarray:
        return np.array([r.terminated for r in self.results], dtype=bool)

    @property
    def truncated(self) -> np.ndarray:
        return np.array([r.truncated for r in self.results], dtype=bool)


class SyncEnvClient:
    """Blocking wrapper around an :class:`EnvClient`; its event loop runs in a private
    thread, so it also works where a loop is already running (Jupyter)."""

    def __init__(self, client: EnvClient) -> None:
        self.client = client
        self._cm: Any = None
        self._portal: Any = None

    def __enter__(self) -> SyncEnvClient:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connect(self) -> SyncEnvClient:
        if self._portal is None:
            from anyio.from_thread import start_blocking_portal

            self._cm = start_blocking_portal("asyncio")
            self._portal = self._cm.__enter__()
            try:
                self._portal.call(self.client.connect)
            except BaseException:
                self._cm.__exit__(None, None, None)
                self._portal = self._cm = None
                raise
        return self

    def close(self) -> None:
        if self._portal is not None:
            try:
                self._portal.call(self.client.close)
            finally:
                self._cm.__exit__(None, None, None)
                self._portal = self._cm = None

    def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._portal is None:
            raise FailedPrecondition("not connected: use `with client.sync() as env:` or call connect()")
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    @property
    def info(self) -> environment_pb2.EnvironmentInfo | None:
        return self.client.info

    @property
    def rubric(self) -> rubric_pb2.RubricSpec | None:
        return self.client.rubric

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              options: Mapping[str, Any] | None = None, **kw: Any) -> StepResult:
        return self._run(self.client.reset, seed, episode_id, options, **kw)

    def step(self, action: Any, **kw: Any) -> StepResult:
        return self._run(self.client.step, action, **kw)

    def state(self, **kw: Any) -> SessionState:
        return self._run(self.client.state, **kw)

    def list_tools(self, **kw: Any) -> list[Tool]:
        return self._run(self.client.list_tools, **kw)

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, **kw: Any) -> ToolResult:
        return self._run(self.client.call_tool, name, arguments, **kw)

    def reset_batch(self, env_ids: Sequence[int] = (), seeds: Sequence[int] = (), **kw: Any) -> BatchResult:
        return self._run(self.client.reset_batch, env_ids, seeds, **kw)

    def step_batch(self, actions: Sequence[Any], env_ids: Sequence[int] = (), **kw: Any) -> BatchResult:
        return self._run(self.client.step_batch, actions, env_ids, **kw)




