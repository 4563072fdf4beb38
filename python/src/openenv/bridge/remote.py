"""A remote gRPC environment server as a bridge backend (``openenv bridge grpc://HOST:PORT``).

Every bridged session is one ``Session`` stream to the remote server, opened with the
client's gRPC connection (:class:`openenv.client.GrpcConnection`: request ids, pipelining,
keepalive, and resumption of a dropped stream with exactly-once requests, RFC 0006), so
capacity, idle reaping and errors are the remote server's. Payloads are
converted with the remote's advertised descriptors (:mod:`openenv.json_protocol.payloads`), so the
environment may be written in any language and no stubs are needed here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import grpc

from openenv.bridge.backend import Backend, BackendSession, call_tool_args
from openenv.client.grpc import GrpcConnection, channel_ready, open_channel, token_metadata
from openenv.client.load import get_load
from openenv.client.urls import parse_url
from openenv.errors import EnvError, Unavailable
from openenv.json_protocol.frames import JsonStep
from openenv.json_protocol.payloads import CALL_TOOL, PayloadJson, message_to_json
from openenv.protocol import PROTOCOL_VERSION, EpisodeStatus
from openenv.runtime.tools import Tool, ToolResult
from openenv.v1 import environment_pb2, environment_pb2_grpc, load_pb2
from openenv.values import from_struct, to_struct

__all__ = ["RemoteBackend", "RemoteSession"]


class RemoteSession(BackendSession):
    """One remote ``Session`` stream."""

    def __init__(self, backend: RemoteBackend, conn: GrpcConnection) -> None:
        self._b = backend
        self._c = conn
        self.id = conn.session_id
        self._terminate: Callable[[EnvError], None] | None = None
        self._closing = False
        conn.on_end(self._ended)

    def _ended(self, err: EnvError) -> None:
        if not self._closing and self._terminate is not None:
            self._terminate(err)

    async def _request(self, req: environment_pb2.SessionRequest) -> environment_pb2.SessionResponse:
        resp = await self._c.request(req)
        if resp.WhichOneof("kind") == "error":
            raise EnvError.from_proto(resp.error)
        return resp

    def _ts(self, ts: environment_pb2.TimeStep) -> JsonStep:
        b = self._b
        self.last_step = out = JsonStep(
            b.observation.to_json(ts.observation) if ts.HasField("observation") else None,
            ts.reward if ts.HasField("reward") else None,
            ts.terminated,
            ts.truncated,
            from_struct(ts.metadata),
            ts.episode_id,
            ts.step_count,
            message_to_json(ts.reward_breakdown) if ts.HasField("reward_breakdown") else None,
            b.tool_actions,
        )
        return out

    async def reset(self, seed: int | None, episode_id: str | None, options: Mapping[str, object]) -> JsonStep:
        req = environment_pb2.SessionRequest(reset=environment_pb2.ResetRequest(episode_id=episode_id or ""))
        if seed is not None:
            req.reset.seed = seed
        if options:
            to_struct(options, req.reset.options)
        return self._ts((await self._request(req)).reset.time_step)

    async def step(self, action: object, timeout: float | None = None) -> JsonStep:
        req = environment_pb2.SessionRequest()
        st = req.step
        b = self._b
        if b.tool_actions and isinstance(action, dict) and action.get("type") == "call_tool":
            name, args = call_tool_args(action)
            action = {"name": name, "arguments": args}
        elif (
            b.action_fields and isinstance(action, dict) and "metadata" in action and "metadata" not in b.action_fields
        ):
            action = {k: v for k, v in action.items() if k != "metadata"}  # OpenEnv's Action.metadata
        b.action.from_json(action, st.action)
        if timeout is not None:
            st.timeout.FromNanoseconds(int(timeout * 1e9))
        return self._ts((await self._request(req)).step.time_step)

    async def state(self) -> tuple[str, int, str, object]:
        resp = (await self._request(environment_pb2.SessionRequest(state=environment_pb2.StateRequest()))).state
        try:
            status = EpisodeStatus(resp.status).name
        except ValueError:
            status = str(resp.status)
        value = self._b.state.to_json(resp.state) if resp.HasField("state") else None
        return resp.episode_id, resp.step_count, status, value

    async def list_tools(self) -> list[Tool]:
        resp = await self._request(environment_pb2.SessionRequest(list_tools={}))
        return [Tool.from_proto(t) for t in resp.list_tools.tools]

    async def call_tool(self, name: str, arguments: Mapping[str, object], timeout: float | None = None) -> ToolResult:
        req = environment_pb2.SessionRequest(call_tool={"name": name})
        if arguments:
            to_struct(arguments, req.call_tool.arguments)
        if timeout is not None:
            req.call_tool.timeout.FromNanoseconds(int(timeout * 1e9))
        return ToolResult.from_proto((await self._request(req)).call_tool.result)

    def on_terminate(self, callback: Callable[[EnvError], None] | None) -> None:
        self._terminate = callback

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._b._open.discard(self)
        await self._c.close()


class RemoteBackend(Backend):
    """Sessions on a remote gRPC environment server."""

    def __init__(
        self,
        target: str,
        info: environment_pb2.EnvironmentInfo,
        *,
        connect_timeout: float = 30.0,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.target = target
        self.token, self.ca_file = token, ca_file
        self.info = info
        self.connect_timeout = connect_timeout
        self.action = PayloadJson(info.action, info)
        self.observation = PayloadJson(info.observation, info)
        self.state = PayloadJson(info.state, info)
        self.tool_actions = info.action.message_type == CALL_TOOL
        self.action_fields = self.action.fields()
        self._open: set[RemoteSession] = set()
        self._draining = False

    @classmethod
    async def connect(
        cls, target: str, *, connect_timeout: float = 30.0, token: str | None = None, ca_file: str | None = None
    ) -> RemoteBackend:
        """Fetch the remote environment's description (``GetInfo``) and build the backend;
        ``token`` and ``ca_file`` are sent to / trusted of the remote server."""
        scheme, hostport = parse_url(target)
        if scheme not in ("grpc", "grpcs"):
            raise ValueError(f"openenv bridge needs a grpc(s)://HOST:PORT target, got {target!r}")
        ch = open_channel(hostport, secure=scheme == "grpcs", ca_file=ca_file)
        if not await channel_ready(ch, connect_timeout):
            raise Unavailable(f"cannot reach {target} within {connect_timeout:g} s", fatal=True)
        try:
            resp = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
                environment_pb2.GetInfoRequest(), timeout=connect_timeout, metadata=token_metadata(token)
            )
        except grpc.aio.AioRpcError as e:
            if e.code() is grpc.StatusCode.UNAUTHENTICATED:
                raise EnvError.from_code(e.code().value[0], f"GetInfo on {target}: {e.details()}", fatal=True) from e
            raise Unavailable(f"GetInfo on {target} failed: {e.code().name}: {e.details()}", fatal=True) from e
        finally:
            await ch.close()
        return cls(target, resp.info, connect_timeout=connect_timeout, token=token, ca_file=ca_file)

    async def open(self, options: Mapping[str, object] | None = None, client_name: str = "") -> RemoteSession:
        if self._draining:
            raise Unavailable("the bridge is shutting down", fatal=True)
        scheme, hostport = parse_url(self.target)
        conn = GrpcConnection(
            hostport, url=self.target, token=self.token, secure=scheme == "grpcs", ca_file=self.ca_file
        )
        hs = environment_pb2.HandshakeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_name=f"openenv-bridge/{client_name or 'ws'}",
            resumable=True,  # RFC 0006: a dropped bridge-to-server connection is resumed, steps applied once
        )
        to_struct(dict(options or {}), hs.options)
        try:
            await conn.open(hs, self.connect_timeout)
        except EnvError as e:
            e.fatal = True
            raise
        s = RemoteSession(self, conn)
        self._open.add(s)
        return s

    @property
    def active(self) -> int:
        return len(self._open)

    @property
    def draining(self) -> bool:
        return self._draining

    async def load(self) -> load_pb2.ServerLoad | None:
        """The remote server's own load (GetLoad), when it reports one."""
        if not self.info.capabilities.load_reporting:
            return None
        scheme, hostport = parse_url(self.target)
        async with open_channel(hostport, secure=scheme == "grpcs", ca_file=self.ca_file) as ch:
            return await get_load(ch, self.connect_timeout, target=self.target, token=self.token)

    async def stop(self) -> None:
        self._draining = True
        for s in list(self._open):
            if s._terminate is not None:
                s._terminate(Unavailable("the bridge is shutting down", fatal=True))
        for s in list(self._open):
            await s.close()
