"""``/web``: the playground, plain static files shipped in the package (no CDN, works offline).

The page (``static/index.html``, ``app.js``, ``style.css``) reads ``/schema`` and
``/openenv/info``, builds an action form from the advertised JSON Schema or tool list, and
plays over the same ``/ws`` session protocol as any client (no second API). ``/web`` and
``/web/`` answer the page; ``/web/<file>`` one of the static files; anything else 404.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

from openenv.http.asgi import respond

__all__ = ["STATIC_FILES", "serve_web"]

_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}
STATIC_FILES = ("index.html", "app.js", "style.css", "favicon.svg")
_cache: dict[str, tuple[bytes, bytes]] = {}
# The page talks only to its own origin and never runs inline script: a strict policy.
_CSP = b"default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'"


def _load(name: str) -> tuple[bytes, bytes]:
    hit = _cache.get(name)
    if hit is None:
        body = importlib.resources.files(__name__).joinpath("static", name).read_bytes()
        hit = _cache[name] = (body, _TYPES[name[name.rfind(".") :]])
    return hit


async def serve_web(scope: dict[str, Any], send: Any) -> None:
    """Answer one HTTP request under ``/web``."""
    if scope["method"] not in ("GET", "HEAD"):
        await respond(send, 405, b'{"detail":"Method Not Allowed"}')
        return
    path = scope["path"]
    if path == "/web":  # relative asset URLs resolve under /web/
        # A relative location keeps a /t/<token>/ prefix the guard removed (RFC 0003).
        await send({"type": "http.response.start", "status": 307, "headers": [(b"location", b"web/")]})
        await send({"type": "http.response.body", "body": b""})
        return
    name = path[len("/web/") :] or "index.html"
    if name not in STATIC_FILES:
        await respond(send, 404, b'{"detail":"Not Found"}')
        return
    body, ctype = _load(name)
    headers = [
        (b"content-type", ctype),
        (b"cache-control", b"no-cache"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", _CSP),
    ]
    await respond(send, 200, body if scope["method"] == "GET" else b"", headers)
