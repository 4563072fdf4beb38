"""Raw WebSocket clients over loopback sockets, frame by frame (tests of hostile clients).

A real client library never sends a frame with a reserved bit set, an unknown opcode or a
message it does not finish; these helpers do, byte for byte, so the tests of the listeners'
bounds (test_hostile_load.py) exercise the server's own parsing.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from urllib.parse import urlsplit

BINARY_SUBPROTOCOL = "openenv.v1+proto"


def frame(opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, length: int | None = None) -> bytes:
    """A masked client frame. ``rsv``: the three reserved bits (0..7); ``length``: the length
    its header announces (default: the payload's; larger: a frame never finished)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv & 7) << 4 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload)) if len(payload) < 4096 else _mask(payload, mask)
    return head + mask + masked


def _mask(payload: bytes, mask: bytes) -> bytes:
    reps = (len(payload) + 3) // 4
    key = int.from_bytes((mask * reps)[: len(payload)], "big")
    return (int.from_bytes(payload, "big") ^ key).to_bytes(len(payload), "big")


def connect(
    url: str, subprotocol: str | None = BINARY_SUBPROTOCOL, timeout: float = 60.0, source: str | None = None
) -> socket.socket:
    """A socket upgraded to a WebSocket at ``url`` (ws://host:port/path), from the loopback
    address ``source`` if given; AssertionError with the server's answer when it is not a 101."""
    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port), timeout=timeout, source_address=(source, 0) if source else None)
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET {u.path or '/'}{'?' + u.query if u.query else ''} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
        f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    )
    if subprotocol:
        head += f"Sec-WebSocket-Protocol: {subprotocol}\r\n"
    s.sendall((head + "\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 101"):
        s.close()
        raise AssertionError(f"not upgraded: {answer[:300]!r}")
    return s


def close_code(s: socket.socket) -> int | None:
    """Read frames until the server's close frame (its code) or the end of the connection
    (None: closed without one, or the socket's timeout passed)."""
    buf = b""
    while True:
        while True:
            parsed = parse(buf)
            if parsed is None:
                break
            opcode, payload, used = parsed
            buf = buf[used:]
            if opcode == 8:
                return struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError, OSError):
            return None
        if not chunk:
            return None
        buf += chunk


def parse(buf: bytes) -> tuple[int, bytes, int] | None:
    """The first whole frame of ``buf`` from the server (unmasked): (opcode, payload, bytes it
    took), or None while it is incomplete."""
    if len(buf) < 2:
        return None
    opcode, n, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, at = struct.unpack(">H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, at = struct.unpack(">Q", buf[2:10])[0], 10
    if len(buf) < at + n:
        return None
    return opcode, buf[at : at + n], at + n
