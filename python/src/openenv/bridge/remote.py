"""A remote gRPC environment server as a bridge backend (``openenv bridge grpc://HOST:PORT``).

Every bridged session is one ``Session`` stream to the remote server, opened with the
project's own gRPC client (request ids, pipelining, keepalive), so capacity, idle
reaping and errors are the remote server's. Payloads are converted with the remote's
advertised descriptors (:mod:`openenv.bridge.payloads`), so the environment may be
written in any language and no stubs are needed here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from openenv.bridge.backend import Backend, BackendSession, call_tool_args
from openenv.bridge.frames import JsonStep
from openenv.bridge.payloads import CALL_TOOL, PayloadJson, message_to_json
from openenv.client import EnvClient, parse_url
from openenv.codec import from_struct, to_struct
from openenv.errors import EnvError, Unavailable
from openenv.session import EpisodeStatus
from openenv.tools import Tool, ToolResult
from openenv.v1 import environment_pb2, environment_pb2_grpc

__all__ = ["RemoteBackend", "RemoteSession"]


class RemoteSession(BackendSession):
    """One remote ``Session`` stream."""

    def __init__(self, backend: RemoteBackend, client: EnvClient) -> None:
        self._b = backend
        self._c = client
        self.id = client.session_id
        self._terminate: Callable[[EnvError], None] | None = None
        self._closing = False
        if client._reader is not None:
            client._reader.add_done_callback(self._ended)

    def _ended(self, _task: Any) -> None:
        if not self._closing and self._terminate is not None:
            err = self._c._broken or Unavailable("the remote session ended", fatal=True)
            self._terminate(err)

    def _ts(self, ts: environment_pb2.TimeStep) -> JsonStep:
        b = self._b
        return JsonStep(
            b.observation.to_json(ts.observation) if ts.HasField("observation") else None,
            ts.reward if ts.HasField("reward") else None, ts.terminated, ts.truncated,
            from_struct(ts.metadata), ts.episode_id, ts.step_count,
            message_to_json(ts.reward_breakdown) if ts.HasField("reward_breakdown") else None,
            b.tool_actions)

    async def reset(self, seed: int | None, episode_id: str | None, options: Mapping[str, Any]) -> JsonStep:
        req = environment_pb2.SessionRequest(reset=environment_pb2.ResetRequest(episode_id=episode_id or ""))
        if seed is not None:
            req.reset.seed = seed
        if options:
            to_struct(options, req.reset.options)
        return self._ts((await self._c._request(req)).reset.time_step)

    async def step(self, action: Any, timeout: float | None = None) -> JsonStep:
        req = environment_pb2.SessionRequest()
        st = req.step
        b = self._b
        if b.tool_actions and isinstance(action, dict) and action.get("type") == "call_tool":
            name, args = call_tool_args(action)
            action = {"name": name, "arguments": args}
        elif b.action_fields and isinstance(action, dict) and "metadata" in action \
                and "metadata" not in b.action_fields:
            action = {k: v for k, v in action.items() if k != "metadata"}  # OpenEnv's Action.metadata
        b.action.from_json(action, st.action)
        if timeout is not None:
            st.timeout.FromNanoseconds(int(timeout * 1e9))
        return self._ts((await self._c._request(req)).step.time_step)

    async def state(self) -> tuple[str, int, str, Any]:
        resp = (await self._c._request(environment_pb2.SessionRequest(state=environment_pb2.StateRequest()))).state
        try:
            status = EpisodeStatus(resp.status).name
        except ValueError:
            status = str(resp.status)
        value = self._b.state.to_json(resp.state) if resp.HasField("state") else None
        return resp.episode_id, resp.step_count, status, value

    async def list_tools(self) -> list[Tool]:
        return await self._c.list_tools()

    async def call_tool(self, name: str, arguments: Mapping[str, Any], timeout: float | None = None) -> ToolResult:
        return await self._c.call_tool(name, arguments, tool_timeout=timeout)

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

    def __init__(self, target: str, info: environment_pb2.EnvironmentInfo, *, connect_timeout: float = 30.0) -> None:
        self.target = target
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
    async def connect(cls, target: str, *, connect_timeout: float = 30.0) -> RemoteBackend:
        """Fetch the remote environment's description (``GetInfo``) and build the backend."""
        scheme, hostport = parse_url(target)
        if scheme != "grpc":
            raise ValueError(f"openenv bridge needs a grpc://HOST:PORT target, got {target!r}")
        async with grpc.aio.insecure_channel(hostport) as ch:
            try:
                await asyncio.wait_for(ch.channel_ready(), connect_timeout)
                resp = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
                    environment_pb2.GetInfoRequest(), timeout=connect_timeout)
            except TimeoutError:
                raise Unavailable(f"cannot reach {target} within {connect_timeout:g} s", fatal=True) from None
            except grpc.aio.AioRpcError as e:
                raise Unavailable(f"GetInfo on {target} failed: {e.code().name}: {e.details()}", fatal=True) from e
        return cls(target, resp.info, connect_timeout=connect_timeout)

    async def open(self, options: Mapping[str, Any] | None = None, client_name: str = "") -> RemoteSession:
        if self._draining:
            raise Unavailable("the bridge is shutting down", fatal=True)
        client = EnvClient(self.target, client_name=f"openenv-bridge/{client_name or 'ws'}",
                           options=options, connect_timeout=self.connect_timeout)
        try:
            await client.connect()
        except EnvError as e:
            e.fatal = True
            raise
        s = RemoteSession(self, client)
        self._open.add(s)
        return s

    @property
    def active(self) -> int:
        return len(self._open)

    @property
    def draining(self) -> bool:
        return self._draining

    async def stop(self) -> None:
        self._draining = True
        for s in list(self._open):
            if s._terminate is not None:
                s._terminate(Unavailable("the bridge is shutting down", fatal=True))
        for s in list(self._open):
            await s.close()
