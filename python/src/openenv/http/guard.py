"""The HTTP side's gatekeeper: an ASGI layer in front of :class:`~openenv.http.app.BridgeApp`.

Every HTTP request and WebSocket upgrade passes, in order (RFC 0003, docs/security.md):

1. ``Host`` and ``Origin`` (:class:`~openenv.security.BrowserPolicy`): refused with 403
   (``PERMISSION_DENIED``) — cross-site WebSocket hijacking, CSRF and DNS rebinding;
2. the bearer token (:class:`~openenv.security.TokenSet`), when one is configured: refused
   with 401 (``UNAUTHENTICATED``, ``WWW-Authenticate: Bearer``). ``/health`` stays open.
   Browsers cannot set headers on a WebSocket, so ``/ws`` and the ``/mcp`` WebSocket also
   take the token as an offered subprotocol ``bearer.<token>`` (the server then selects
   ``openenv`` when offered, else no subprotocol), or as ``?access_token=<token>``. Clients
   that only take a base URL and can set nothing (OpenEnv's stock clients) use the prefix
   ``/t/<token>/`` on every route: ``http://host:8000/t/<token>`` as their base URL. Tokens
   in URLs may end up in proxies' logs: prefer the header;
3. ``POST`` needs ``Content-Type: application/json`` (415 otherwise): a cross-site
   ``text/plain`` form cannot reach a tool.

A refused WebSocket gets its HTTP status when the server supports the ASGI
``websocket.http.response`` extension (uvicorn does), else a plain 403.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openenv.http.asgi import respond
from openenv.json_protocol import frames
from openenv.runtime.session import CLIENT
from openenv.security import BrowserPolicy, TokenSet
from openenv.security.auth import WS_TOKEN_PREFIX, Authenticator

__all__ = ["Guard", "WS_TOKEN_PREFIX", "ws_token_accepted"]


_OPEN_PATHS = frozenset({"/health"})


def _headers(scope: dict[str, Any]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for k, v in scope.get("headers", ()):
        k = k.lower()
        out[k] = out[k] + b", " + v if k in out and k in (b"sec-websocket-protocol",) else v
    return out


def _text(v: bytes | None) -> str | None:
    return None if v is None else v.decode("latin-1")


class Guard:
    """ASGI middleware applying the policy above to ``app``."""

    def __init__(
        self, app: Any, tokens: TokenSet | Authenticator | None = None, browser: BrowserPolicy | None = None
    ) -> None:
        self.app = app
        # The check every listener applies (security.auth): the server's own when given.
        self.auth = tokens if isinstance(tokens, Authenticator) else Authenticator(tokens)
        self.tokens = self.auth.tokens
        self.browser = browser or BrowserPolicy()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        CLIENT.set(str(client[0]) if client else "")  # this connection's task: sessions counted per client
        h = _headers(scope)
        why = self.browser.refusal(_text(h.get(b"host")), _text(h.get(b"origin")))
        if why is not None:
            await self._refuse(scope, receive, send, 403, "PERMISSION_DENIED", why)
            return
        subprotocol: str | None = None
        url_token = _path_token(scope)
        if url_token is not None:
            token, rest = url_token
            if not self.tokens.accepts(token) or not self.tokens:
                await self._refuse(scope, receive, send, 401, "UNAUTHENTICATED", "the token in the URL is not accepted")
                return
            scope = {**scope, "path": rest, "raw_path": rest.encode()}
        elif self.auth and scope["path"] not in _OPEN_PATHS:
            if kind == "websocket":
                why, subprotocol = self._ws_token(scope, h)
            else:
                why = self.auth.refusal(h.get(b"authorization"))
            if why is not None:
                await self._refuse(scope, receive, send, 401, "UNAUTHENTICATED", why)
                return
        if kind == "http" and scope["method"] == "POST":
            ctype = (h.get(b"content-type") or b"").split(b";", 1)[0].strip().lower()
            if ctype != b"application/json":
                await self._refuse(
                    scope, receive, send, 415, "INVALID_ARGUMENT", "POST needs Content-Type: application/json"
                )
                return
        if subprotocol is not None:
            send = _with_subprotocol(send, subprotocol)
        await self.app(scope, receive, send)

    def _ws_token(self, scope: dict[str, Any], h: dict[bytes, bytes]) -> tuple[str | None, str | None]:
        """(why the upgrade is refused or None, the subprotocol to select when the token came as one)."""
        offered = [p.strip() for p in (_text(h.get(b"sec-websocket-protocol")) or "").split(",") if p.strip()]
        query = scope.get("query_string", b"").decode("latin-1")
        why, how = self.auth.websocket_refusal(h.get(b"authorization"), offered, query)
        if how == "subprotocol":
            return None, "openenv" if "openenv" in offered else ""
        return why, None

    async def _refuse(self, scope: dict[str, Any], receive: Any, send: Any, status: int, code: str, why: str) -> None:
        body = frames.dumps({"detail": why, "status": code}).encode()
        headers = [(b"content-type", b"application/json")]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="openenv"'))
        if scope["type"] == "http":
            await respond(send, status, body, headers)
            return
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})


def ws_token_accepted(tokens: TokenSet, offered: Sequence[str], query: str) -> str | None:
    """How a WebSocket upgrade without an accepted ``Authorization`` header carries an accepted
    token: ``"subprotocol"`` (an offered ``bearer.<token>``), ``"query"`` (``?access_token=``),
    or None (it does not); :meth:`Authenticator.websocket_refusal` says it for every listener."""
    return Authenticator(tokens).websocket_refusal(None, offered, query)[1] if tokens else None


def _path_token(scope: dict[str, Any]) -> tuple[str, str] | None:
    """(token, the path without the prefix) of a ``/t/<token>/...`` path; None otherwise."""
    path: str = scope["path"]
    if not path.startswith("/t/"):
        return None
    token, _, rest = path[3:].partition("/")
    return token, "/" + rest


def _with_subprotocol(send: Any, subprotocol: str) -> Any:
    async def wrapped(msg: dict[str, Any]) -> None:
        if msg["type"] == "websocket.accept" and subprotocol and "subprotocol" not in msg:
            msg = {**msg, "subprotocol": subprotocol}
        await send(msg)

    return wrapped
