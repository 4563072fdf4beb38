"""The bridge's ASGI application: OpenEnv's HTTP surface over a :class:`Backend`.

Routes (docs/bridge.md has the frames and shapes):

================  ==========  =============================================================
path              method      what
================  ==========  =============================================================
``/ws``           WebSocket   OpenEnv's session protocol (:mod:`openenv.http.ws`)
``/v1/session``   WebSocket   the protocol's binary transport, one ``SessionRequest`` /
                              ``SessionResponse`` per message (:mod:`openenv.http.binary`;
                              only when the app was given the host's engine)
``/mcp``          POST        MCP: Streamable HTTP (official ``mcp`` SDK) for MCP clients,
                              OpenEnv's plain JSON-RPC (``tools/*``, ``openenv/session/*``)
                              for requests that do not accept ``text/event-stream``
``/mcp``          GET/DELETE  MCP Streamable HTTP (SSE stream, session end)
``/mcp``          WebSocket   OpenEnv's raw JSON-RPC session
``/reset``        POST        OpenEnv's stateless endpoints: one session per request
``/step``         POST        (:mod:`openenv.http.stateless`); not for tools-only
``/state``        GET         environments
``/health``       GET         ``{"status": "healthy"}`` (503 ``unhealthy`` while draining)
``/metadata``     GET         OpenEnv's ``EnvironmentMetadata``
``/schema``       GET         ``{"action", "observation", "reset_observation", "state"}``
``/openapi.json`` GET         OpenAPI 3.1 document, ``info.version`` 1.0.0
``/openenv/info`` GET         the protocol's ``EnvironmentInfo`` as proto3 JSON
``/load``         GET         the server's live load, ``ServerLoad`` as proto3 JSON (RFC 0005)
================  ==========  =============================================================

It is a plain ASGI callable (no framework on the hot path): every document is built
once, at construction.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from google.protobuf import json_format

from openenv.errors import EnvError
from openenv.http.asgi import respond
from openenv.http.backend import Backend
from openenv.http.binary import PATH as BINARY_PATH
from openenv.http.binary import serve_binary
from openenv.http.context import SessionRegistry
from openenv.http.mcp import StreamableMcp, serve_mcp_http, serve_mcp_ws
from openenv.http.stateless import PATHS as STATELESS_PATHS
from openenv.http.stateless import serve_stateless
from openenv.http.ws import serve_ws
from openenv.json_protocol import frames
from openenv.json_protocol.payloads import info_to_json
from openenv.protocol import PROTOCOL_VERSION
from openenv.runtime.session import DEFAULT_MAX_MESSAGE_BYTES
from openenv.values import from_struct

log = logging.getLogger("openenv.http")

__all__ = ["BridgeApp", "SessionRegistry"]


def _metadata_doc(backend: Backend) -> dict[str, Any]:
    info = backend.info
    md = from_struct(info.metadata)
    return {
        "name": info.name,
        "description": info.description,
        "readme_content": md.get("readme_content", md.get("readme")),
        "version": info.version or None,
        "author": md.get("author"),
        "documentation_url": md.get("documentation_url"),
    }


def _schema_doc(backend: Backend) -> dict[str, Any]:
    info = backend.info
    if backend.tool_actions:
        action: dict[str, Any] = {
            "title": "CallToolAction",
            "type": "object",
            "properties": {
                "type": {"const": "call_tool", "default": "call_tool"},
                "tool_name": {"type": "string"},
                "arguments": {"type": "object"},
                "metadata": {"type": "object"},
            },
            "required": ["tool_name"],
        }
    else:
        action = from_struct(info.action.json_schema)
    observation = from_struct(info.observation.json_schema)
    env_state = from_struct(info.state.json_schema)
    state: dict[str, Any] = {
        "title": "State",
        "type": "object",
        "additionalProperties": True,
        "properties": {
            "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "step_count": {"type": "integer", "minimum": 0},
            "status": {"type": "string", "enum": ["NOT_STARTED", "RUNNING", "TERMINATED", "TRUNCATED", "ABORTED"]},
        },
    }
    if isinstance(env_state.get("properties"), dict):
        state["properties"] = {**env_state["properties"], **state["properties"]}
    elif env_state:
        state["properties"]["state"] = env_state
    return {"action": action, "observation": observation, "reset_observation": observation, "state": state}


def _openapi_doc(backend: Backend) -> dict[str, Any]:
    info = backend.info

    def get(summary: str, tag: str) -> dict[str, Any]:
        return {
            "get": {
                "summary": summary,
                "tags": [tag],
                "responses": {
                    "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
                },
            }
        }

    obj: dict[str, Any] = {"type": "object"}
    ok = {"200": {"description": "OK", "content": {"application/json": {"schema": obj}}}}
    errors = {
        "422": {"description": "Invalid body or action (FastAPI's detail list)"},
        "503": {"description": "At capacity, or draining"},
    }
    stateless: dict[str, Any] = {
        "/reset": {
            "post": {
                "summary": "Reset a fresh environment (a session for this request only): its first observation",
                "tags": ["Environment Control"],
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": True,
                                "properties": {
                                    "seed": {"type": ["integer", "null"], "minimum": 0},
                                    "episode_id": {"type": ["string", "null"], "maxLength": 255},
                                },
                            }
                        }
                    }
                },
                "responses": {**ok, **errors},
            }
        },
        "/step": {
            "post": {
                "summary": "Reset a fresh environment, apply one action, return the observation (no state is kept)",
                "tags": ["Environment Control"],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": True,
                                "required": ["action"],
                                "properties": {
                                    "action": obj,
                                    "timeout_s": {"type": ["number", "null"], "exclusiveMinimum": 0},
                                    "request_id": {"type": ["string", "null"], "maxLength": 255},
                                },
                            }
                        }
                    },
                },
                "responses": {**ok, **errors},
            }
        },
        "/state": get("The state of a fresh environment (a session for this request only)", "State Management"),
    }
    paths: dict[str, Any] = {} if info.capabilities.tools_only else stateless
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"openenv environment: {info.name}",
            "version": "1.0.0",
            "description": (
                f"{info.description}\n\nOpenEnv-compatible HTTP surface of an openenv "
                f"server (protocol {info.protocol_version or PROTOCOL_VERSION}). Sessions run "
                "over the WebSocket at /ws (OpenEnv frames); tools over /mcp (MCP "
                "Streamable HTTP, or OpenEnv's JSON-RPC). /reset, /step and /state are "
                "OpenEnv's stateless endpoints: each request runs on a session of its own, "
                "closed before the answer."
            ),
        },
        "paths": {
            **paths,
            "/health": get("Health check", "Health"),
            "/metadata": get("Environment metadata", "Environment Info"),
            "/schema": get("JSON Schemas of action, observation and state", "Schema"),
            "/openenv/info": get("The protocol's EnvironmentInfo (proto3 JSON)", "Environment Info"),
            "/mcp": {
                "post": {
                    "summary": "MCP JSON-RPC (Streamable HTTP or OpenEnv's JSON-RPC)",
                    "tags": ["MCP"],
                    "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
                    "responses": {"200": {"description": "JSON-RPC response"}},
                }
            },
        },
    }


class BridgeApp:
    """ASGI application serving a :class:`Backend` on OpenEnv's HTTP surface.

    ``max_message_bytes``: the largest request body and reply (default: the backend's
    advertised ``max_message_bytes``); a larger reply is answered with an in-band
    ``RESOURCE_EXHAUSTED`` error (RFC 0003), as the gRPC listener does. ``engine``: the
    protocol engine of the served environment (:class:`openenv.Host` passes its own); with
    it, the binary WebSocket transport is served on ``/v1/session`` (RFC 0011).
    """

    def __init__(self, backend: Backend, *, max_message_bytes: int | None = None, engine: Any = None) -> None:
        self.backend = backend
        self.engine = engine
        self.max_message_bytes = (
            max_message_bytes or backend.info.capabilities.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        )
        self.registry = SessionRegistry(backend)
        self.protocol_version = backend.info.protocol_version or PROTOCOL_VERSION
        self.info_json = info_to_json(backend.info)
        self.info_b64 = base64.b64encode(backend.info.SerializeToString()).decode()
        self._docs = {
            "/metadata": frames.dumps(_metadata_doc(backend)).encode(),
            "/schema": frames.dumps(_schema_doc(backend)).encode(),
            "/openapi.json": frames.dumps(_openapi_doc(backend)).encode(),
            "/openenv/info": frames.dumps(self.info_json).encode(),
        }
        self.browser: Any = None  # the listener's openenv.security.BrowserPolicy, set by HttpServer
        #: In a worker of several (:mod:`openenv.workers`): its :class:`~openenv.workers.WorkerPeers`,
        #: which relay requests naming a sibling's session to it; None in a server of one.
        self.peers: Any = None
        self._mcp_http: Any = None
        self._mcp_lock = asyncio.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "websocket":
            path = scope["path"]
            if path == "/ws":
                await serve_ws(self, scope, receive, send)
            elif path == "/mcp":
                await serve_mcp_ws(self, scope, receive, send)
            elif path == BINARY_PATH and self.engine is not None:
                await serve_binary(self.engine, self.max_message_bytes, scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008, "reason": f"no WebSocket at {path}"})
        elif kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/mcp":
            await serve_mcp_http(self, scope, receive, send)
            return
        if path == "/health":
            if method not in ("GET", "HEAD"):
                await respond(send, 405, b'{"detail":"Method Not Allowed"}')
            elif self.backend.draining:
                await respond(send, 503, b'{"status":"unhealthy"}')
            else:
                await respond(send, 200, await self._health())
            return
        if path == "/load":
            await self._load(method, send)
            return
        if path in STATELESS_PATHS:
            await serve_stateless(self, scope, receive, send)
            return
        doc = self._docs.get(path)
        if doc is None and path == "/":
            doc = frames.dumps(
                {
                    "name": self.backend.info.name,
                    "websocket": "/ws",
                    "mcp": "/mcp",
                    "docs": sorted([*self._docs, "/health", "/load"]),
                }
            ).encode()
        if doc is None:
            await respond(send, 404, b'{"detail":"Not Found"}')
        elif method not in ("GET", "HEAD"):
            await respond(send, 405, b'{"detail":"Method Not Allowed"}')
        else:
            await respond(send, 200, doc)

    async def _health(self) -> bytes:
        """``{"status": "healthy"}``; with several worker processes (RFC 0013) also
        ``"workers": {"up": U, "total": N}``, and the status is ``"degraded"`` while a worker is
        down (it died, or its loop stopped answering the supervisor's heartbeat: it is being
        replaced): the server serves, with less capacity (HTTP 200 either way)."""
        report = await self.backend.worker_loads()
        if report is None:
            return b'{"status":"healthy"}'
        up = sum(1 for w in report.workers if w.up)
        status = "healthy" if up == len(report.workers) else "degraded"
        return frames.dumps({"status": status, "workers": {"up": up, "total": len(report.workers)}}).encode()

    async def _load(self, method: str, send: Any) -> None:
        if method not in ("GET", "HEAD"):
            await respond(send, 405, b'{"detail":"Method Not Allowed"}')
            return
        report = await self.backend.worker_loads()
        if report is not None:  # several workers: the whole server's, and each worker's
            doc = json_format.MessageToDict(
                report.load, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            doc["workers"] = [
                json_format.MessageToDict(
                    w, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
                )
                for w in report.workers
            ]
            await respond(send, 200, frames.dumps(doc).encode())
            return
        try:
            load = await self.backend.load()
        except EnvError as e:
            await respond(send, 503, frames.dumps({"detail": e.message}).encode())
            return
        if load is None:
            await respond(send, 404, b'{"detail":"this server reports no load"}')
            return
        doc = json_format.MessageToDict(
            load, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        await respond(send, 200, frames.dumps(doc).encode())

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                try:
                    await self.backend.start()
                except Exception as e:  # noqa: BLE001 - reported to the server, which stops
                    await send({"type": "lifespan.startup.failed", "message": f"{type(e).__name__}: {e}"})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def mcp_http(self) -> Any:
        """The Streamable HTTP MCP endpoint (started on first use)."""
        if self._mcp_http is None:
            async with self._mcp_lock:
                if self._mcp_http is None:
                    m = StreamableMcp(self)
                    await m.start()
                    self._mcp_http = m
        return self._mcp_http

    async def aclose(self) -> None:
        """Stop the MCP endpoint, close HTTP-created sessions, stop the backend."""
        if self._mcp_http is not None:
            await self._mcp_http.stop()
            self._mcp_http = None
        await self.registry.close_all()
        await self.backend.stop()
