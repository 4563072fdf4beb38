"""The episode's tools for the agent: a JSON-RPC relay (``envtool``) and an MCP server.

:class:`HarnessApp` is the runner's one loopback server:

* ``/e/{key}/v1/...``: the capture proxy (:mod:`openenv.harness.proxy`);
* ``/e/{key}/tools``: OpenEnv's JSON-RPC (``tools/list``, ``tools/call``), what ``envtool`` speaks;
* ``/e/{key}/mcp``: the same tools over MCP Streamable HTTP (the official ``mcp`` SDK,
  stateless, JSON responses) for harnesses that take MCP servers (Codex CLI, OpenCode).

Either way a tool call is a step of the episode's environment session (:class:`EpisodeTools`):
counted, rewarded and recorded, one at a time; after the episode ends every call answers
"the episode is over" as an error. ``key`` is random per episode.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from openenv.client import ToolEnvClient
from openenv.errors import EnvError
from openenv.harness._asgi import BodyTooLarge, Receive, Scope, Send, read_body, send_json
from openenv.harness.proxy import CaptureProxy
from openenv.http.mcp import ManagerTask
from openenv.protocol import StepResult
from openenv.record.recorder import EpisodeLog
from openenv.runtime.tools import CallToolAction

__all__ = ["EpisodeMcp", "EpisodeTools", "HarnessApp"]


class EpisodeTools:
    """One episode's session as the tool relay serves it: each call a step, one at a time."""

    def __init__(self, env: ToolEnvClient, log: EpisodeLog, tools: list[dict[str, Any]]) -> None:
        self.env, self.log, self.tools = env, log, tools
        self.lock = asyncio.Lock()
        self.last: StepResult[Any] | None = None
        self.done = False

    async def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        async with self.lock:
            if self.done:
                over = [{"type": "text", "text": "the episode is over"}]
                return {"content": over, "isError": True, "episode_over": True}
            action = CallToolAction(name, dict(arguments))
            t0, p0 = time.time(), time.perf_counter()
            r = await self.env.step(action)
            self.log.add(r, action, t0, time.perf_counter() - p0, has_action=True)
            self.last, self.done = r, r.done
            result = getattr(r.observation, "result", None)
            out: dict[str, Any] = {"content": [], "isError": False, "episode_over": r.done}
            if result is not None:
                out.update(content=list(result.content), isError=bool(result.is_error), data=result.data)
                if result.structured_content is not None:
                    out["structuredContent"] = result.structured_content
            return out


class HarnessApp:
    """The runner's loopback server (see the module's text)."""

    def __init__(self, proxy: CaptureProxy) -> None:
        self.proxy = proxy
        self.episodes: dict[str, EpisodeTools] = {}
        self.mcp = EpisodeMcp(self.episodes)

    async def start(self) -> None:
        await self.mcp.start()

    async def stop(self) -> None:
        await self.mcp.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith("/e/"):
            if path.endswith("/tools"):
                await self._tools(path[3:-6], receive, send)
                return
            if path.endswith("/mcp"):
                await self.mcp.handle(path[3:-4], scope, receive, send)
                return
        await self.proxy(scope, receive, send)

    async def _tools(self, key: str, receive: Receive, send: Send) -> None:
        episode = self.episodes.get(key)
        if episode is None:
            await send_json(send, 404, {"error": {"code": -32601, "message": "no such episode"}})
            return
        try:
            req = json.loads(await read_body(receive, 8 * 1024 * 1024))
            method, params = req["method"], req.get("params") or {}
            rid = req.get("id")
        except (BodyTooLarge, ValueError, KeyError, TypeError) as e:
            await send_json(send, 200, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": str(e)}})
            return
        try:
            if method == "tools/list":
                result: Any = {"tools": episode.tools}
            elif method == "tools/call" and isinstance(params.get("name"), str):
                args = params.get("arguments") or {}
                if not isinstance(args, Mapping):
                    raise ValueError("arguments must be an object")
                result = await episode.call(params["name"], args)
            else:
                raise LookupError(f"unknown method {method!r}")
        except LookupError as e:
            await send_json(send, 200, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": str(e)}})
            return
        except (EnvError, ValueError) as e:
            await send_json(send, 200, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": str(e)}})
            return
        await send_json(send, 200, {"jsonrpc": "2.0", "id": rid, "result": _jsonable(result)})


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class EpisodeMcp:
    """MCP Streamable HTTP for every episode of a run: one SDK session manager; the handlers
    find the episode from the request's path."""

    def __init__(self, episodes: Mapping[str, EpisodeTools]) -> None:
        import mcp_types as types
        from mcp.server.lowlevel import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        self.types = types
        self.episodes = episodes
        server = Server(
            "openenv-episode",
            version="1",
            description="The tools of one environment episode; every call is a step.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        names = ["127.0.0.1", "localhost", "[::1]"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
            allowed_origins=[f"http://{n}{p}" for n in names for p in ("", ":*")],
        )
        self.manager = StreamableHTTPSessionManager(
            server, stateless=True, json_response=True, security_settings=security
        )
        self._running = ManagerTask(self.manager)

    async def start(self) -> None:
        await self._running.start()

    async def stop(self) -> None:
        await self._running.stop(10)

    async def handle(self, key: str, scope: Scope, receive: Receive, send: Send) -> None:
        if key not in self.episodes:
            await send_json(send, 404, {"error": "no such episode"})
            return
        await self.manager.handle_request(scope, receive, send)

    def _episode(self, ctx: Any) -> EpisodeTools:
        from mcp.shared.exceptions import MCPError

        req = getattr(ctx, "request", None)
        path = str(req.url.path) if req is not None else ""
        key = path[3:-4] if path.startswith("/e/") and path.endswith("/mcp") else ""
        episode = self.episodes.get(key)
        if episode is None:
            raise MCPError(-32602, "no such episode")
        return episode

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        return self.types.ListToolsResult.model_validate({"tools": self._episode(ctx).tools})

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        from mcp.shared.exceptions import MCPError

        episode = self._episode(ctx)
        try:
            out = await episode.call(params.name, params.arguments or {})
        except EnvError as e:
            raise MCPError(-32602, str(e)) from None
        wire: dict[str, Any] = {"content": out["content"], "isError": out["isError"]}
        if isinstance(out.get("structuredContent"), dict):
            wire["structuredContent"] = out["structuredContent"]
        return self.types.CallToolResult.model_validate(_jsonable(wire))
