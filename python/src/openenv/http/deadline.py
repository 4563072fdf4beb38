"""Per-connection deadlines that measure the peer's slowness, not the server's (issue 34).

A request-head deadline (the slowloris guard, :attr:`~openenv.settings.HttpLimits.head_timeout_s`)
armed when a connection is accepted used to fire whenever the server's event loop next ran
after the deadline: when that loop had been starved (a connect burst saturating it, a machine
whose cores other processes hold, a process stopped), the deadline fired on connections whose
request head had arrived long before, still unread in the socket. uvloop (libuv) even runs
due timers before it polls the sockets in the same loop iteration, so every such connection
was closed before its bytes were read (``python/tests/test_starved_server.py`` reproduces it:
a loop blocked inside a socket read past the deadline, every upgrade then closed unread).

:class:`PatientDeadline` charges the peer only for time the loop was there to read it:

* when the timer fires late (the loop ran more than :data:`LAG_S` behind), the lateness is
  time the server was away: it is given back (the deadline moves by that much), up to
  :data:`MAX_GIVEN_BACK` times the deadline in all, so a peer cannot be held forever by a
  server that stays saturated;
* when it fires on time, the verdict still waits for one more pass of the loop over its
  sockets (a timer :data:`READ_PASS_S` away): what arrived before the deadline is read
  first, and reading it is what cancels the deadline.

A peer that really sends slowly on a server that is keeping up is cut at the deadline as
before (plus one loop pass).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["LAG_S", "MAX_GIVEN_BACK", "READ_PASS_S", "PatientDeadline"]

LAG_S = 0.05
"""Lateness of a deadline's timer beyond which the loop is taken to have been away."""
MAX_GIVEN_BACK = 10.0
"""The most lateness given back to one deadline, in multiples of the deadline itself."""
READ_PASS_S = 0.005
"""How far the verdict is put off so that the loop polls its sockets once before it (a timer, not
``call_soon``: uvloop runs ready callbacks before it polls, and a delay it rounds to 0 ms is one)."""


class PatientDeadline:
    """Call ``on_expiry`` once ``seconds`` of the peer's time have passed (see the module's
    text); :meth:`cancel` before that (the peer made it) stops it. One timer at a time."""

    __slots__ = ("_budget", "_due", "_handle", "_loop", "_on_expiry", "_read_pass")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float, on_expiry: Callable[[], None]) -> None:
        self._loop, self._on_expiry = loop, on_expiry
        self._budget = MAX_GIVEN_BACK * seconds
        self._read_pass = False
        self._due = loop.time() + seconds
        self._handle: asyncio.TimerHandle | None = loop.call_at(self._due, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def pending(self) -> bool:
        return self._handle is not None

    def _fire(self) -> None:
        now = self._loop.time()
        late = now - self._due
        if late > LAG_S and self._budget > 0:  # the loop was away: the peer gets that time back
            given = min(late, self._budget)
            self._budget -= given
            self._read_pass = False
            self._due = now + given
        elif not self._read_pass:  # read what is already there before judging
            self._read_pass = True
            self._due = now + READ_PASS_S
        else:
            self._handle = None
            self._on_expiry()
            return
        self._handle = self._loop.call_at(self._due, self._fire)
