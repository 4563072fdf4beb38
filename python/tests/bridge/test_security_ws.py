"""The WebSocket send side is bounded (RFC 0003): a client that sends requests but never
reads its replies fills the server's socket buffer; the server drops it within the send
timeout and frees its session, instead of pinning the slot forever."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from typing import Any

import httpx
import pytest
from bridge_kit import WAIT_S, served, wait_until

import openenv
from openenv.http import HttpOptions
from openenv.http.limits import HttpLimits

pytestmark = pytest.mark.anyio


class Bulky(openenv.Environment):
    """Every reset answers 256 KiB."""

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> str:
        return "x" * 256 * 1024

    def step(self, action: Any) -> str:
        return ""


def _frame(text: bytes) -> bytes:
    """A masked client text frame (RFC 6455 §5.2)."""
    mask = os.urandom(4)
    n = len(text)
    head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(text))


def _never_reading_client(port: int, frames: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's buffer fills
    s.settimeout(WAIT_S)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16))
    s.sendall(
        b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (port, key)
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)  # only the handshake's answer is ever read
    assert head.startswith(b"HTTP/1.1 101")
    for _ in range(frames):
        s.sendall(_frame(b'{"type": "reset", "data": {}}'))
    return s


async def test_a_client_that_never_reads_is_dropped_and_its_session_freed() -> None:
    opts = HttpOptions(limits=HttpLimits(ws_send_timeout_s=1.0), ws_ping_interval=0)
    async with served(Bulky, http_options=opts) as srv:
        sock = await asyncio.to_thread(_never_reading_client, srv.http.port, 200)  # 200 x 256 KiB of replies
        try:
            await wait_until(lambda: srv.manager.opened_total == 1, "the session to open")
            await wait_until(lambda: srv.manager.active == 0, "the never-reading client's session to be freed")
        finally:
            sock.close()
        async with openenv.EnvClient(srv.http_url) as env:  # the server serves on
            assert len((await env.reset()).observation) == 256 * 1024


async def test_a_frame_of_millions_of_empty_objects_is_refused_unparsed_and_the_session_goes_on() -> None:
    from bridge_kit import Ws

    async with served(Bulky) as srv:
        ws_url = srv.http_url.replace("http://", "ws://") + "/ws"
        async with Ws(ws_url, proxy=None, max_size=None) as ws:
            bomb = "[" + "{}," * 1_000_000 + "{}]"  # 3 MB; parsed, a million dicts
            answer = await ws.ask(bomb)
            assert answer["type"] == "error" and answer["data"]["code"] == "INVALID_JSON"
            assert "refused unparsed" in answer["data"]["message"]
            reply = await ws.ask({"type": "reset", "data": {}})
            assert reply["type"] == "observation"
        async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False) as http:
            r = await http.post("/mcp", content=bomb, headers={"Content-Type": "application/json"})
            assert r.status_code == 200 and r.json()["error"]["code"] == -32700
