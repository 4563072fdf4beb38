"""Small ASGI helpers of the HTTP side."""

from __future__ import annotations

from typing import Any

__all__ = ["JSON_HEADERS", "respond"]

JSON_HEADERS = [(b"content-type", b"application/json")]


async def respond(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a complete HTTP response (JSON by default)."""
    await send({"type": "http.response.start", "status": status, "headers": headers or JSON_HEADERS})
    await send({"type": "http.response.body", "body": body})
