"""A raw HTTP/2 client of a gRPC server (tests of hostile clients): streams that start a
``Session`` message and never finish it, or never send one, with the ``h2`` library's framing
(no gRPC client library lets a caller stop in the middle of a message)."""

from __future__ import annotations

import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

PATH = "/openenv.v1.EnvironmentService/Session"


class RawGrpc:
    """One HTTP/2 connection to ``host:port``."""

    def __init__(self, host: str, port: int, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        self.authority = f"{host}:{port}"
        self.sent: dict[int, int] = {}  # stream -> bytes of its message sent
        self.want: dict[int, int] = {}  # stream -> bytes of its message to send in all
        self.ended: dict[int, str] = {}  # stream -> its grpc-status (or "reset")
        self.closed = False
        self._flush()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def open(self, message_bytes: int | None, send_bytes: int = 0, *, flush: bool = True) -> int:
        """A new ``Session`` stream. ``message_bytes``: the length its first message's prefix
        announces (None: it sends nothing at all, a silent stream); ``send_bytes``: how many
        of those bytes to send (flow control permitting, as :meth:`pump` goes). ``flush=False``
        keeps its frames for the next :meth:`flush` (a burst of streams sent at once)."""
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", PATH),
                (":authority", self.authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        if message_bytes is not None:
            self.conn.send_data(sid, struct.pack(">BI", 0, message_bytes))
            self.sent[sid], self.want[sid] = 0, send_bytes
        if flush:
            self._flush()
        return sid

    def flush(self) -> None:
        """Send what :meth:`open` kept."""
        self._flush()

    def pump(self, seconds: float) -> None:
        """Send what flow control allows and read the server for ``seconds``."""
        end = time.monotonic() + seconds
        self.sock.settimeout(0.05)
        while time.monotonic() < end and not self.closed:
            for sid, done in list(self.sent.items()):
                todo = self.want[sid] - done
                if todo <= 0 or sid in self.ended:
                    continue
                try:
                    n = min(todo, self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size, 1 << 16)
                except (h2.exceptions.StreamClosedError, KeyError):
                    continue
                if n > 0:
                    try:
                        self.conn.send_data(sid, b"\0" * n)
                    except h2.exceptions.H2Error:
                        continue
                    self.sent[sid] = done + n
            self._flush()
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                self.closed = True
                return
            if not data:
                self.closed = True
                return
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.H2Error:
                self.closed = True
                return
            for ev in events:
                if isinstance(ev, h2.events.TrailersReceived):
                    self.ended[ev.stream_id] = dict(ev.headers).get("grpc-status", "?")
                elif isinstance(ev, h2.events.ResponseReceived) and ("grpc-status", "") != ("", ""):
                    status = dict(ev.headers).get("grpc-status")
                    if status is not None:
                        self.ended[ev.stream_id] = status
                elif isinstance(ev, h2.events.StreamReset):
                    self.ended.setdefault(ev.stream_id, "reset")
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    self.closed = True
            self._flush()

    def close(self) -> None:
        self.sock.close()
