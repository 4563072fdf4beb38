"""``/mcp``: the environment's tools for MCP clients and for OpenEnv's JSON-RPC clients.

Two dialects share the path:

* **MCP Streamable HTTP** (``initialize``, ``tools/list``, ``tools/call``, SSE, session
  ids, ``DELETE``), served by the official ``mcp`` SDK's ``StreamableHTTPSessionManager``
  with a low-level ``Server`` whose handlers send protocol requests to the session. A request goes
  here when it accepts ``text/event-stream`` (every MCP client must send that), carries
  an ``Mcp-Session-Id`` or ``MCP-Protocol-Version`` header, or is a GET/DELETE. Each MCP
  session gets its own environment session (one capacity slot), closed on ``DELETE``,
  on the SDK's session expiry, or by the idle reaper.
* **OpenEnv's JSON-RPC** (plain JSON in, plain JSON out, always HTTP 200): ``tools/list``,
  ``tools/call`` (optional ``params.session_id``), ``openenv/session/create`` /
  ``openenv/session/close``, ``initialize`` and ``ping``. Also served on the ``/mcp``
  WebSocket (one session per connection) and inside ``/ws`` ``mcp`` frames.

Every environment session here is an :class:`~openenv.http.backend.EngineSession`: ``tools/list``
and ``tools/call`` reach the environment as the protocol's ``list_tools`` and ``call_tool``
requests, through the same engine as gRPC and ``/ws`` (or ``openenv bridge``'s relay); the
JSON-RPC methods with no request kind (``initialize``, ``ping``, ``openenv/session/*``) are
answered here. Tool calls are side calls: no step is counted and no reward is given (as in
OpenEnv).
Errors: unknown tool or invalid arguments ``-32602``, capacity ``-32000``, an
environment without tools ``-32603``; a tool that raises returns ``isError: true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from openenv.errors import EnvError, ResourceExhausted
from openenv.http.asgi import respond
from openenv.http.backend import EngineSession, spawn
from openenv.http.limits import bounded_loads, check_json
from openenv.json_protocol import frames
from openenv.json_protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
)
from openenv.json_protocol.jsonrpc import error as _error
from openenv.json_protocol.jsonrpc import error_of as _rpc_error
from openenv.json_protocol.jsontext import dumpb, least_size
from openenv.runtime.session import CLIENT
from openenv.runtime.tools import Tool, ToolResult

if TYPE_CHECKING:
    from openenv.http.context import AppContext

log = logging.getLogger("openenv.http.mcp")

__all__ = ["StreamableMcp", "handle_jsonrpc", "mcp_result", "mcp_tool", "serve_mcp_http", "serve_mcp_ws"]

DEFAULT_MCP_VERSION = "2025-06-18"


def mcp_tool(t: Tool) -> dict[str, Any]:
    """A tool descriptor as MCP's ``Tool`` (camelCase wire form), annotations included (those
    MCP names, and this project's, e.g. ``openenv/sandbox``, RFC 0010)."""
    d: dict[str, Any] = {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
    if t.output_schema is not None:
        d["outputSchema"] = t.output_schema
    if t.annotations:
        d["annotations"] = dict(t.annotations)
    return d


def sdk_tool(types: Any, t: Tool) -> Any:
    """:func:`mcp_tool` as the MCP SDK's ``Tool``. Its ``ToolAnnotations`` keeps only the hints
    MCP names: the others (``openenv/...``) go to the tool's ``_meta``, where MCP puts a
    tool's extension metadata, and :func:`openenv.json_protocol.frames.tools_from_json` reads them back."""
    d = mcp_tool(t)
    annotations = d.pop("annotations", None) or {}
    known = set(types.ToolAnnotations.model_fields) | {f.alias for f in types.ToolAnnotations.model_fields.values()}
    hints = {k: v for k, v in annotations.items() if k in known}
    extra = {k: v for k, v in annotations.items() if k not in known}
    tool = types.Tool.model_validate(d)
    if hints:
        tool.annotations = types.ToolAnnotations.model_validate(hints)
    if extra:
        tool.meta = {**(tool.meta or {}), **extra}
    return tool


def mcp_result(r: ToolResult) -> dict[str, Any]:
    """A tool result as MCP's ``CallToolResult`` plus OpenEnv's ``data`` (the unwrapped
    structured value that OpenEnv's ``MCPToolClient.call_tool`` returns)."""
    d: dict[str, Any] = {"content": r.content, "isError": r.is_error, "data": r.data}
    if r.structured_content is not None:
        d["structuredContent"] = r.structured_content
    return d


async def handle_jsonrpc(
    app: AppContext,
    req: Any,
    *,
    session: EngineSession | None = None,
    timeout: float | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """Answer one OpenEnv-style JSON-RPC request (never raises; errors are JSON-RPC errors).

    ``session`` is the connection's session (the ``/mcp`` WebSocket); without it,
    ``params.session_id`` names an HTTP-created session, else a temporary session serves the
    one request. ``session_id`` names the connection's session where its tool calls go
    through the protocol engine instead (``/ws`` ``mcp`` frames: this answers every other
    method, and the malformed requests, for it).
    """
    own = session.id if session is not None else session_id
    if not isinstance(req, dict):
        return _error(None, INVALID_REQUEST, "Invalid request: expected a JSON-RPC object")
    rid = req.get("id")
    method = req.get("method")
    if req.get("jsonrpc") != "2.0" or not isinstance(method, str):
        return _error(rid, INVALID_REQUEST, "Invalid request: 'jsonrpc' must be \"2.0\" and 'method' a string")
    params = req.get("params") if req.get("params") is not None else {}
    if not isinstance(params, dict):
        return _error(rid, INVALID_PARAMS, "Params must be an object")
    temp: EngineSession | None = None
    try:
        if method == "openenv/session/create":
            created = own or (await app.registry.create(params.get("options"))).id
            return {"jsonrpc": "2.0", "id": rid, "result": {"session_id": created}}
        if method == "openenv/session/close":
            sid = params.get("session_id")
            if not sid:
                return _error(rid, INVALID_PARAMS, "Invalid params - 'session_id' is required")
            if own is not None and sid == own:
                return _error(rid, INVALID_REQUEST, "Cannot close active WebSocket-managed session via MCP method")
            if app.peers is not None and (relayed := await _relayed(app, sid, req)) is not None:
                return relayed
            return {"jsonrpc": "2.0", "id": rid, "result": await app.registry.close(sid)}
        if method == "initialize":
            info = app.backend.info
            return {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": params.get("protocolVersion") or DEFAULT_MCP_VERSION,
                    "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": info.name, "version": info.version},
                },
            }
        if method == "ping":
            return {"jsonrpc": "2.0", "id": rid, "result": {}}
        if method not in ("tools/list", "tools/call"):
            return _error(rid, METHOD_NOT_FOUND, f"Method not found: {method}")
        name: Any = None
        args: Any = {}
        if method == "tools/call":
            name = params.get("name")
            if not name or not isinstance(name, str):
                return _error(rid, INVALID_PARAMS, "Missing 'name' in params")
            args = params.get("arguments") or {}
            if not isinstance(args, dict):
                return _error(rid, INVALID_PARAMS, "'arguments' must be an object")
        target = session
        if target is None and session_id is not None:  # a WsStream's tool calls go through the engine
            return _error(rid, INTERNAL_ERROR, f"{method} of this session is not answered here")
        if target is None:
            sid = params.get("session_id")
            if sid:
                if app.peers is not None and (relayed := await _relayed(app, sid, req)) is not None:
                    return relayed
                target = app.registry.get(sid)
            else:
                target = temp = await app.backend.open({}, "openenv-mcp-http")
        if method == "tools/list":
            tools = await target.list_tools()
            return {"jsonrpc": "2.0", "id": rid, "result": {"tools": [mcp_tool(t) for t in tools]}}
        result = await target.call_tool(name, args, timeout)
        return {"jsonrpc": "2.0", "id": rid, "result": mcp_result(result)}
    except EnvError as e:
        return _rpc_error(rid, e)
    except Exception as e:  # answered as a JSON-RPC error
        log.warning("JSON-RPC %s failed", method, exc_info=True)
        return _error(rid, INTERNAL_ERROR, f"{type(e).__name__}: {e}")
    finally:
        if temp is not None:
            await temp.close()


async def _relayed(app: AppContext, sid: Any, req: dict[str, Any]) -> dict[str, Any] | None:
    """The answer of the worker holding session ``sid`` to ``req`` (a worker of several:
    :mod:`openenv.workers`), relayed there as a ``POST /mcp`` of its own; None when ``sid``
    is this worker's (or no worker's), or its worker is gone: it is answered here then."""
    index = app.peers.sibling_of(sid) if isinstance(sid, str) else None
    if index is None:
        return None
    client = CLIENT.get()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"accept", b"application/json")],
        "client": (client, 0) if client else None,
        "server": None,
    }
    body = dumpb(req)
    answer: list[bytes] = []
    status = [0]
    sent = [False]

    async def receive() -> dict[str, Any]:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the relayed request never disconnects by itself
        raise AssertionError("unreachable")

    async def send(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            status[0] = msg["status"]
        elif msg["type"] == "http.response.body":
            answer.append(msg.get("body", b""))

    if not await app.peers.relay_asgi(index, scope, receive, send) or status[0] != 200:
        return None  # the worker is gone (its sessions with it): unknown here, as answered below
    try:
        out = bounded_loads(b"".join(answer))
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def _headers(scope: Mapping[str, Any]) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", ())}


async def _in_worker(peers: Any, scope: dict[str, Any], receive: Any, send: Any) -> tuple[dict[str, Any], Any] | None:
    """A Streamable HTTP request in a worker of several (:mod:`openenv.workers`): the MCP
    session ids it issues begin with its index (``w1.``; the SDK's own id follows), so a
    request naming a sibling's session is relayed to it (None: done). Else the scope as the
    SDK knows its ids (this worker's prefix taken off), and ``send`` putting it on."""
    prefix = f"w{peers.index}.".encode()
    headers = scope.get("headers") or []
    for i, (k, v) in enumerate(headers):
        if k.lower() != b"mcp-session-id":
            continue
        index = peers.sibling_of(v.decode("latin-1"))
        if index is not None:
            if await peers.relay_asgi(index, scope, receive, send):
                return None
            break  # the worker is gone, and its sessions: the SDK answers 404 as for any unknown id
        if v.startswith(prefix):
            scope = {**scope, "headers": [*headers[:i], (k, v[len(prefix) :]), *headers[i + 1 :]]}
        break

    async def naming(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            hs = msg.get("headers") or []
            if any(k.lower() == b"mcp-session-id" for k, _ in hs):
                named = [(k, prefix + v if k.lower() == b"mcp-session-id" else v) for k, v in hs]
                msg = {**msg, "headers": named}
        await send(msg)

    return scope, naming


def _is_streamable(scope: Mapping[str, Any]) -> bool:
    if scope["method"] != "POST":
        return True
    h = _headers(scope)
    return b"text/event-stream" in h.get(b"accept", b"") or b"mcp-session-id" in h or b"mcp-protocol-version" in h


async def _read_body(receive: Any, limit: int) -> bytes:
    body = bytearray()
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ConnectionError("client disconnected")
        body += msg.get("body", b"")
        if len(body) > limit:
            raise ValueError("request body too large")
        if not msg.get("more_body"):
            return bytes(body)


def _json_refusal(body: bytes) -> str | None:
    """Why a JSON body is refused unparsed (:func:`openenv.http.limits.bounded_loads`'s bounds)."""
    try:
        check_json(body)
    except ValueError as e:
        return str(e)
    return None


def _replay(body: bytes, receive: Any) -> Any:
    """``receive`` that first hands out the already read ``body``, then the connection's events."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Any:
        if pending:
            return pending.pop()
        return await receive()

    return replayed


MAX_BATCH = 32
"""Most requests in one JSON-RPC batch on ``POST /mcp`` (MCP 2025-06-18 removed batching;
OpenEnv's JSON-RPC keeps it, bounded: RFC 0003)."""


def _batch_refusal(batch: list[Any]) -> str | None:
    """Why a JSON-RPC batch is refused as a whole (None: it is served): more than
    :data:`MAX_BATCH` requests, or more than one ``openenv/session/create`` (one request
    must not take every slot of the server)."""
    if not batch:
        return "Invalid request: empty batch"
    if len(batch) > MAX_BATCH:
        return f"Invalid request: a batch holds at most {MAX_BATCH} requests, got {len(batch)}"
    creates = sum(1 for r in batch if isinstance(r, dict) and r.get("method") == "openenv/session/create")
    if creates > 1:
        return f"Invalid request: at most one openenv/session/create per batch, got {creates}"
    return None


async def serve_mcp_http(app: AppContext, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/mcp`` over HTTP: route to the MCP SDK or to OpenEnv's JSON-RPC."""
    if _is_streamable(scope):
        if scope["method"] not in ("GET", "POST", "DELETE"):
            await respond(send, 405, b'{"detail":"Method Not Allowed"}')
            return
        if app.peers is not None:  # a worker of several: MCP session ids name their worker
            named = await _in_worker(app.peers, scope, receive, send)
            if named is None:
                return  # relayed to the worker holding its session
            scope, send = named
        await (await app.mcp_http()).handle(scope, receive, send)
        return
    limit = app.max_message_bytes
    try:
        body = await _read_body(receive, limit)
    except ConnectionError:
        return
    except ValueError:
        await respond(send, 413, frames.dumps(_error(None, INVALID_REQUEST, "request too large")).encode())
        return
    try:
        req = bounded_loads(body)
    except ValueError:
        await respond(send, 200, frames.dumps(_error(None, PARSE_ERROR, "Parse error")).encode())
        return
    del body
    if isinstance(req, list):
        refusal = _batch_refusal(req)
        if refusal is not None:
            await respond(send, 200, frames.dumps(_error(None, INVALID_REQUEST, refusal)).encode())
            return
        out: Any = [await handle_jsonrpc(app, r) for r in req]
    else:
        out = await handle_jsonrpc(app, req)
    req = None
    await respond(send, 200, bounded_reply(out, limit))


def _too_large(rid: Any, size: int, limit: int) -> dict[str, Any]:
    err = ResourceExhausted(
        f"the reply (at least {size} bytes) exceeds the {limit}-byte message limit; the request was carried out"
    )
    return _rpc_error(rid, err)


def bounded_reply(out: Any, limit: int) -> bytes:
    """The JSON text of a JSON-RPC answer (or batch of answers), at most ``limit`` bytes: an
    answer that would exceed it is replaced by a ``RESOURCE_EXHAUSTED`` error for its id (the
    request was carried out), as the gRPC listener answers a reply over the message limit."""
    least = least_size(out, limit)  # a tool's text result is there three times: known before encoding it
    if not isinstance(out, list) and least > limit:
        return dumpb(_too_large(out.get("id") if isinstance(out, dict) else None, least, limit))
    body = dumpb(out)
    if len(body) <= limit:
        return body
    if not isinstance(out, list):
        return dumpb(_too_large(out.get("id") if isinstance(out, dict) else None, len(body), limit))
    del body
    items = [dumpb(x) for x in out]
    total = sum(len(x) for x in items) + len(items) + 1
    for i in sorted(range(len(items)), key=lambda i: -len(items[i])):  # the largest answers go first
        if total <= limit:
            break
        x = out[i]
        items[i] = dumpb(_too_large(x.get("id") if isinstance(x, dict) else None, len(items[i]), limit))
        total = sum(len(x) for x in items) + len(items) + 1
    return b"[" + b",".join(items) + b"]"


async def serve_mcp_ws(app: AppContext, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/mcp`` WebSocket: raw JSON-RPC frames on one session per connection."""
    msg = await receive()
    if msg["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    try:
        session = await app.backend.open({}, "openenv-mcp-ws")
    except EnvError as e:
        data = {"status": e.code.name}
        if isinstance(e.details, dict):
            data.update(e.details)
        await send({"type": "websocket.send", "text": frames.dumps(_error(None, SERVER_ERROR, e.message, data))})
        await send({"type": "websocket.close", "code": 1000})
        return
    ended = asyncio.Event()
    task = asyncio.current_task()

    def terminate(err: EnvError) -> None:
        ended.set()
        if task is not None:
            task.cancel()

    session.on_terminate(terminate)
    try:
        while True:
            msg = await receive()
            if msg["type"] != "websocket.receive":
                return
            raw = msg.get("text") or msg.get("bytes") or b""
            del msg
            out: Any
            try:
                req = bounded_loads(raw)
            except ValueError as e:
                out = _error(None, PARSE_ERROR, f"Parse error: {e}")
            else:
                del raw  # the request's text goes once parsed
                out = await handle_jsonrpc(app, req, session=session)
                req = None
            await send({"type": "websocket.send", "text": bounded_reply(out, app.max_message_bytes).decode()})
            out = None
    except asyncio.CancelledError:
        if not ended.is_set():
            raise
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": 1000, "reason": "session ended"})
    finally:
        session.on_terminate(None)
        await asyncio.shield(session.close())


def _transport_security(policy: Any) -> Any:
    """The MCP SDK's DNS-rebinding protection, on when the listener is bound to loopback
    (RFC 0003): loopback hosts and origins, plus the listed ones. (The guard in front,
    :mod:`openenv.http.guard`, applies the same rules to every route first.)"""
    from mcp.server.transport_security import TransportSecuritySettings

    if policy is None or not policy.check_host:
        return None
    names = ["127.0.0.1", "localhost", "[::1]", *sorted(policy.allowed_hosts)]
    hosts = [h for n in names for h in (n, f"{n}:*")]
    origins = [f"{s}://{n}:*" for n in names for s in ("http", "https")]
    origins += [f"{s}://{n}" for n in names for s in ("http", "https")]
    if policy.any_origin:  # the SDK has no "any origin": the guard's Host check stands alone
        return None
    origins += sorted(policy.allowed_origins)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class ManagerTask:
    """The lifetime of an SDK ``StreamableHTTPSessionManager`` (its ``run()`` context) held
    open in a task of the running loop, as a start/stop pair for servers that are not an
    ASGI lifespan."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Returns once the manager runs; raises its failure if it cannot start."""
        ready = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                ready.set()
                await self._stop.wait()

        self._task = asyncio.ensure_future(run())
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():
            waiter.cancel()
            self._task.result()  # raises the failure
            raise RuntimeError("the MCP session manager stopped")

    async def stop(self, timeout_s: float) -> None:
        """Ends the manager's run (its sessions end), waiting up to ``timeout_s``."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, timeout_s)


class StreamableMcp:
    """MCP Streamable HTTP on the official SDK; one environment session per MCP session."""

    def __init__(self, app: AppContext) -> None:
        import mcp_types as types
        from mcp.server.lowlevel import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.app = app
        self.types = types
        info = app.backend.info
        self.server = Server(
            info.name or "openenv",
            version=info.version or "0",
            description=info.description or None,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        idle = info.capabilities.idle_timeout.ToNanoseconds() / 1e9
        self.manager = StreamableHTTPSessionManager(
            self.server,
            session_idle_timeout=idle if idle > 0 else None,
            max_sessions=max(1, app.backend.max_sessions) if app.backend.max_sessions else None,
            security_settings=_transport_security(app.browser),
            max_request_body_size=app.max_message_bytes,
        )
        self.sessions: dict[str, EngineSession] = {}
        self._running = ManagerTask(self.manager)

    async def start(self) -> None:
        await self._running.start()

    async def stop(self) -> None:
        await self._running.stop(5)
        for sid in list(self.sessions):
            await self._drop(sid)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] == "POST":
            # The body is read here (within the message limit, as the SDK would), and refused
            # unparsed when too fine-grained for its size (RFC 0003), before the SDK parses it.
            try:
                body = await _read_body(receive, self.app.max_message_bytes)
            except ConnectionError:
                return
            except ValueError:
                await respond(send, 413, frames.dumps(_error(None, INVALID_REQUEST, "request too large")).encode())
                return
            why = _json_refusal(body)
            if why is not None:
                await respond(send, 400, frames.dumps(_error(None, PARSE_ERROR, f"Parse error: {why}")).encode())
                return
            receive = _replay(body, receive)
        await self.manager.handle_request(scope, receive, send)
        if scope["method"] == "DELETE":
            sid = _headers(scope).get(b"mcp-session-id")
            if sid:
                await self._drop(sid.decode("latin-1"))

    async def _drop(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            await s.close()

    def _expire(self, sid: str) -> Any:
        def expire(err: EnvError) -> None:
            spawn(self._drop(sid))

        return expire

    async def _session(self, ctx: Any) -> tuple[EngineSession, bool]:
        req = getattr(ctx, "request", None)
        sid = req.headers.get("mcp-session-id") if req is not None else None
        if not sid:
            return await self.app.backend.open({}, "mcp"), True
        s = self.sessions.get(sid)
        if s is None:
            s = await self.app.backend.open({}, "mcp")
            self.sessions[sid] = s
            s.on_terminate(self._expire(sid))
        return s, False

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        s, temp = await self._session_or_raise(ctx)
        try:
            tools = await s.list_tools()
        except EnvError as e:
            raise self._mcp_error(e) from None
        finally:
            if temp:
                await s.close()
        return self.types.ListToolsResult(tools=[sdk_tool(self.types, t) for t in tools])

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        s, temp = await self._session_or_raise(ctx)
        try:
            result = await s.call_tool(params.name, params.arguments or {})
        except EnvError as e:
            raise self._mcp_error(e) from None
        finally:
            if temp:
                await s.close()
        wire: dict[str, Any] = {"content": result.content, "isError": result.is_error}
        if result.structured_content is not None:
            wire["structuredContent"] = result.structured_content
        limit = self.app.max_message_bytes
        size = least_size(wire, limit)
        if size <= limit:
            size = len(dumpb(wire))
        if size > limit:  # as the other listeners answer a reply over the message limit (RFC 0003)
            raise self._mcp_error(
                ResourceExhausted(
                    f"the reply ({size} bytes) exceeds the {limit}-byte message limit; the request was carried out"
                )
            )
        return self.types.CallToolResult.model_validate(wire)

    async def _session_or_raise(self, ctx: Any) -> tuple[EngineSession, bool]:
        try:
            return await self._session(ctx)
        except EnvError as e:
            raise self._mcp_error(e) from None

    @staticmethod
    def _mcp_error(err: EnvError) -> Exception:
        from mcp.shared.exceptions import MCPError

        rpc = _rpc_error(None, err)["error"]
        return MCPError(rpc["code"], rpc["message"], rpc["data"])
