"""The HTTP side's observation: an ASGI middleware in front of :class:`~openenv.http.app.BridgeApp`.

* ``/ws`` connections are watched frame by frame (request kind from the frame's ``type``,
  reply status from the reply frame, the session from ``scope["openenv.session"]``, set by
  :mod:`openenv.http.ws` once the session is open) and reported to the
  :class:`~openenv.observability.Observer` as transport ``websocket``;
* ``POST /mcp`` requests are reported as transport ``mcp`` (kind: the JSON-RPC method);
* every plain HTTP request is counted by route, method and status;
* ``GET /metrics`` answers the Prometheus exposition of the server's metrics;
* ``/web`` serves the playground (:mod:`openenv.http.web`) when enabled.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from openenv.http.asgi import respond
from openenv.http.limits import PARSED, UNPARSED, bounded_loads
from openenv.http.web import serve_web
from openenv.json_protocol.jsontext import loads
from openenv.observability import CONTENT_TYPE, Observer
from openenv.observability.observer import Pending

__all__ = ["ObservedApp"]

_ROUTES = frozenset(
    {
        "/",
        "/ws",
        "/mcp",
        "/health",
        "/metadata",
        "/schema",
        "/openapi.json",
        "/openenv/info",
        "/metrics",
        "/reset",
        "/step",
        "/state",
    }
)
_MAX_PARSED = 1 << 20  # MCP bodies larger than this are counted, not parsed


def _route(path: str) -> str:
    if path in _ROUTES:
        return path
    if path == "/web" or path.startswith("/web/"):
        return "/web"
    return "other"  # bounded label values, whatever clients ask for


def _nbytes(text: str | bytes) -> int:
    """Size on the wire of a frame's payload (UTF-8 for text)."""
    if isinstance(text, str) and not text.isascii():
        return len(text.encode())
    return len(text)


def _request_kind(frame: Any) -> tuple[str, Any]:
    """(kind, id) of a parsed ``/ws`` frame; ``invalid`` when it is not a JSON object."""
    if type(frame) is not dict:
        return "invalid", None
    typ = frame.get("type")
    data = frame.get("data")
    if typ == "step" and type(data) is dict and data.get("type") in ("list_tools", "call_tool"):
        return str(data["type"]), frame.get("id")
    return (typ if isinstance(typ, str) and len(typ) <= 40 else "unknown"), frame.get("id")


def _reply_code(frame: Any) -> str:
    if type(frame) is not dict or frame.get("type") != "error":
        return "OK"
    data = frame.get("data")
    if type(data) is dict:
        return str(data.get("status") or data.get("code") or "ERROR")
    return "ERROR"


class ObservedApp:
    """``app`` with metrics, logs and traces (when ``observer`` is given) and the playground
    (when ``web``). Everything else passes through unchanged."""

    def __init__(self, app: Any, observer: Observer | None = None, *, web: bool = True) -> None:
        self.app = app
        self.observer = observer
        self.web = web
        self._mcp = observer.session("mcp") if observer is not None else None

    def __getattr__(self, name: str) -> Any:  # backend, registry, aclose, ... of the wrapped app
        return getattr(self.app, name)

    @property
    def browser(self) -> Any:
        """The wrapped app's browser policy: set here, it is set there (the MCP SDK's own
        DNS-rebinding protection is configured from it)."""
        return self.app.browser

    @browser.setter
    def browser(self, policy: Any) -> None:
        self.app.browser = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "websocket" and scope["path"] == "/ws" and self.observer is not None:
            await self._ws(self.observer, scope, receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, method = scope["path"], scope["method"]
        status = [0]
        downstream = send
        if self.observer is not None:

            async def counted(msg: dict[str, Any]) -> None:
                if msg["type"] == "http.response.start":
                    status[0] = msg["status"]
                await downstream(msg)

            send = counted
        try:
            if path == "/metrics":
                m = self.observer.metrics if self.observer is not None else None
                if method not in ("GET", "HEAD"):
                    await respond(send, 405, b'{"detail":"Method Not Allowed"}')
                elif m is None:
                    await respond(send, 404, b'{"detail":"metrics need prometheus-client (the http extra)"}')
                else:
                    body = await self.observer.render()  # type: ignore[union-attr]  # m is its metrics
                    await respond(send, 200, body, [(b"content-type", CONTENT_TYPE.encode())])
            elif path == "/web" or path.startswith("/web/"):
                if self.web:
                    await serve_web(scope, send)
                else:
                    await respond(send, 404, b'{"detail":"the playground is off on this server (--web enables it)"}')
            elif path == "/mcp" and method == "POST" and self._mcp is not None:
                await self._mcp_post(self._mcp, scope, receive, send)
            else:
                await self.app(scope, receive, send)
        finally:
            if self.observer is not None and status[0]:
                self.observer.http_request(_route(path), method, status[0])

    async def _mcp_post(self, so: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = bytearray()
        reply = bytearray()
        status = [0]
        pending: list[Pending] = []

        async def rcv() -> dict[str, Any]:
            msg: dict[str, Any] = await receive()
            if msg["type"] == "http.request" and not pending:
                body.extend(msg.get("body", b"")[: _MAX_PARSED - len(body)])
                if not msg.get("more_body"):
                    method = "invalid"
                    try:
                        doc = bounded_loads(bytes(body))
                        if type(doc) is dict and isinstance(doc.get("method"), str):
                            method = doc["method"][:60]
                        elif type(doc) is list:
                            method = "batch"
                    except ValueError:
                        pass
                    pending.append(so.begin(method, None, len(body)))
            return msg

        async def snd(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            elif msg["type"] == "http.response.body" and len(reply) < _MAX_PARSED:
                reply.extend(msg.get("body", b""))
            await send(msg)

        try:
            await self.app(scope, rcv, snd)
        finally:
            if pending:
                code = "OK" if 0 < status[0] < 400 else f"HTTP_{status[0]}"
                if code == "OK" and reply[:1] == b"{":
                    try:
                        doc = loads(bytes(reply))
                        if type(doc) is dict and doc.get("error") is not None:
                            code = "JSONRPC_ERROR"
                    except ValueError:
                        pass
                so.end(pending[0], code, len(reply))

    async def _ws(self, observer: Observer, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = scope.get("headers") or []
        so = observer.session("websocket", trace_headers=headers)
        pending: deque[Pending] = deque()
        refused = [False]

        def opened() -> None:
            s = scope.get("openenv.session")
            if s is not None and not so.opened and not refused[0]:
                so.open(s.id, lambda: s.env_seconds)

        async def rcv() -> dict[str, Any]:
            msg: dict[str, Any] = await receive()
            opened()
            if msg["type"] == "websocket.receive" and so.opened:
                raw = msg.get("text")
                if raw is None:
                    raw = msg.get("bytes") or b""
                # Parsed once, within the bridge's bounds, for both of us: the frame (or why it
                # is not one) travels on to openenv.http.ws with the message.
                try:
                    frame = msg[PARSED] = bounded_loads(raw)
                    kind, rid = _request_kind(frame)
                except ValueError as e:
                    msg[UNPARSED] = str(e)
                    kind, rid = "invalid", None
                frame = None
                p = so.begin(kind, rid, _nbytes(raw))
                if kind == "close":
                    so.end(p)
                else:
                    pending.append(p)
            return msg

        async def snd(msg: dict[str, Any]) -> None:
            await send(msg)
            if msg["type"] != "websocket.send":
                return
            text = msg.get("text")
            if text is None:
                text = msg.get("bytes") or b""
            opened()
            if not so.opened:
                if not refused[0]:
                    refused[0] = True
                    try:
                        frame = loads(text)
                    except ValueError:
                        frame = None
                    so.refuse(_reply_code(frame))
                return
            if not pending:
                return  # the idle timeout's or the drain's error frame: not a reply
            p = pending.popleft()
            # Only error replies are parsed (small); a time step is read from the session.
            code = "OK"
            head = text[:15]
            if head in ('{"type":"error"', b'{"type":"error"'):
                try:
                    code = _reply_code(loads(text))
                except ValueError:
                    code = "ERROR"
            episode_id = ""
            s: Any = scope.get("openenv.session")
            ts = getattr(s, "last_step", None)
            if code == "OK" and ts is not None and p.kind in ("reset", "step", "call_tool"):
                s.last_step = None  # counted once
                episode_id = ts.episode_id
                so.time_step(0, ts.reward, ts.step_count, ts.terminated, ts.truncated)
            so.end(p, code, _nbytes(text), episode_id)

        try:
            await self.app(scope, rcv, snd)
        finally:
            so.close()
