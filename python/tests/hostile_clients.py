"""Hostile clients in a process of their own (test_hostile_load.py): the server's memory is
then its own, measured from /proc, and the clients' sockets cost the server's loop nothing.

    python hostile_clients.py unfinished URL COUNT BYTES SOURCES

opens COUNT WebSockets to URL (``ws://``; ``/ws`` gets no subprotocol), from SOURCES loopback
addresses in turn (127.0.0.2, 127.0.0.3, ...: as many clients to the server), and on each
starts a message of just under 4 MiB and sends BYTES of it, never the rest: every even one in
a single frame it never finishes, every odd one as a first fragment (a whole frame, FIN clear)
never followed by the rest. It prints ``{"sent": N}`` once done, then, when a line arrives on
stdin, waits for every connection to end and prints ``{"codes": {close code: count}}`` (``null``:
closed without a close frame, or still open at its timeout).

    python hostile_clients.py large URL COUNT BYTES

opens COUNT connections to the binary listener at URL; on each, a handshake and then one
whole message of BYTES (bytes that are not a request: answered ``INVALID_ARGUMENT`` in band),
each answer read; prints ``{"sent": N}``, then keeps the connections open, idle, until a line
arrives on stdin.

    python hostile_clients.py silent HOST:PORT CONNECTIONS STREAMS

opens STREAMS ``Session`` streams on each of CONNECTIONS HTTP/2 connections to a gRPC server
(each connection's in one burst), none of which ever sends a byte; prints ``{"open": N}`` once
the server has their headers, and then, when a line arrives on stdin, reads until every stream
ended and prints ``{"ended": {grpc-status: count}}``.
"""

from __future__ import annotations

import collections
import json
import socket
import sys
import threading
import time

import ws_raw
from h2_raw import RawGrpc

from openenv.v1 import environment_pb2

MiB = 1 << 20
WAIT_S = 120.0  # hang guard of every wait


def _say(doc: object) -> None:
    print(json.dumps(doc), flush=True)


def unfinished(url: str, count: int, size: int, sources: int) -> None:
    socks: list[socket.socket] = []
    refused = 0
    for i in range(count):
        source = f"127.0.0.{2 + i % sources}"
        try:
            s = ws_raw.connect(url, None if url.endswith("/ws") else ws_raw.BINARY_SUBPROTOCOL, source=source)
        except (AssertionError, OSError):
            refused += 1
            continue
        payload = b"\x01" * size
        if i % 2 == 0:  # one frame announced at just under 4 MiB, BYTES of it sent
            data = ws_raw.frame(2, payload, length=4 * MiB - 64)[: 14 + size]
        else:  # a whole first fragment, never continued
            data = ws_raw.frame(2, payload, fin=False)
        try:
            s.sendall(data)
        except OSError:
            pass  # refused already (1009): read below
        socks.append(s)
    _say({"sent": len(socks), "refused_upgrades": refused})
    sys.stdin.readline()
    codes: collections.Counter[str] = collections.Counter()
    for s in socks:
        s.settimeout(WAIT_S)
        codes[str(ws_raw.close_code(s))] += 1
        s.close()
    _say({"codes": dict(codes)})


def _answer(s: socket.socket) -> bytes:
    """The next whole frame's payload from the server."""
    buf = b""
    while (parsed := ws_raw.parse(buf)) is None:
        chunk = s.recv(65536)
        assert chunk, "the server closed the connection"
        buf += chunk
    return parsed[1]


def large(url: str, count: int, size: int) -> None:
    hello = environment_pb2.SessionRequest(request_id=1)
    hello.handshake.protocol_version = "1.0"
    socks = []
    for _ in range(count):
        s = ws_raw.connect(url)
        s.settimeout(WAIT_S)
        s.sendall(ws_raw.frame(2, hello.SerializeToString()))
        assert environment_pb2.SessionResponse.FromString(_answer(s)).HasField("handshake")
        s.sendall(ws_raw.frame(2, b"\xff" * size))
        assert environment_pb2.SessionResponse.FromString(_answer(s)).HasField("error")
        socks.append(s)
    _say({"sent": len(socks)})
    sys.stdin.readline()
    for s in socks:
        s.close()


def silent(target: str, connections: int, streams: int) -> None:
    host, _, port = target.rpartition(":")
    conns = [RawGrpc(host, int(port)) for _ in range(connections)]
    for c in conns:  # every connection's streams in one burst: the server has them all at once
        for _ in range(streams):
            c.open(None, flush=False)
    for c in conns:
        c.flush()
    for c in conns:
        c.pump(0.2)
    _say({"open": connections * streams})
    stop = threading.Event()
    seen = threading.Event()

    def pump() -> None:  # keep reading (acks, pings) while the test runs its own client
        while not stop.is_set():
            for c in conns:
                c.pump(0.05)
            if sum(len(c.ended) for c in conns) >= connections * streams:
                seen.set()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    sys.stdin.readline()
    seen.wait(WAIT_S)
    time.sleep(0.2)
    stop.set()
    t.join()
    ended: collections.Counter[str] = collections.Counter()
    for c in conns:
        ended.update(c.ended.values())
    _say({"ended": dict(ended), "closed": sum(c.closed for c in conns)})


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    if what == "unfinished":
        unfinished(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif what == "large":
        large(args[0], int(args[1]), int(args[2]))
    else:
        silent(args[0], int(args[1]), int(args[2]))
