"""Capacity-scale work for the checks: sessions by the thousand on a connection of their own,
ended politely all at once."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from openenv.v1 import environment_pb2 as pb
from openenv_conformance.context import Context
from openenv_conformance.errors import Violation
from openenv_conformance.transport import SessionLike

__all__ = ["end_all", "own_connection"]


def end_all(sessions: Sequence[SessionLike], timeout: float) -> None:
    """End ``sessions`` politely and all at once: every close request and half-close is sent
    before any end is awaited (``timeout`` seconds for all of them), and only a stream that has
    not ended by then is cancelled.

    Why not cancel them: each cancelled stream is an HTTP/2 RST_STREAM, and servers guarding
    against "rapid reset" floods end the whole connection after about a thousand of them in
    quick succession (nghttp2, inside Node's http2 and so grpc-js, answers GOAWAY
    INTERNAL_ERROR), failing every stream just started on it. Why not one by one: a round trip
    per session at capacity scale takes seconds on a loaded machine."""
    live = [s for s in sessions if s.end is None]
    for s in live:
        if s.opened:
            s.send(s.request(close=pb.CloseRequest()))
        s.half_close()
    deadline = time.monotonic() + timeout
    for s in live:
        try:
            s.wait_end(max(0.01, deadline - time.monotonic()))
        except Violation:
            pass
    for s in sessions:
        s.cancel()  # a no-op on the wire for a stream that has ended; forgets the session


@contextlib.contextmanager
def own_connection(ctx: Context) -> Iterator[Any]:
    """A connection of the check's own for capacity-scale work, closed when the check ends.

    A check opening max_sessions streams (up to the suite's capacity limit, 1,024) keeps
    them off the connection every other check shares: whatever the server does to a
    connection carrying that many streams and their ends (a GOAWAY, a flow-control stall)
    then stays with this check, which reports it, instead of failing the next check's
    streams. Sessions left open on it are ended politely before the connection closes."""
    before = list(ctx.wire.sessions)  # held, so that no id below is reused meanwhile
    known = {id(s) for s in before}
    channel = ctx.wire.new_channel()
    try:
        yield channel
    finally:
        end_all([s for s in ctx.wire.sessions if id(s) not in known], min(10.0, ctx.options.timeout))
        ctx.wire.close_channel(channel)
