"""What unfinished WebSocket messages may hold in memory, server-wide (issue 50).

A WebSocket message is held in memory until its last byte arrives: the frame parser keeps a
frame's bytes until the frame is whole, and a fragmented message's frames are kept until its
final one. A client that sends a message up to just under ``max_message_bytes`` and never
finishes it pins that much per connection, and with thousands of connections the server's
memory (4,096 connections x 4 MiB: 16 GiB). Two bounds end that, on every WebSocket listener
(the binary one, and the HTTP listener's ``/ws`` and ``/v1/session``):

* a **deadline** on an incomplete message (:attr:`~openenv.settings.HttpLimits.message_timeout_s`,
  counted from its first byte as the peer's time, :class:`~openenv.http.deadline.PatientDeadline`):
  past it the connection is closed with 1008 and its bytes are freed;
* a **budget** (:class:`ReceiveBudget`): the bytes of unfinished messages held by every
  connection of the process together (:attr:`~openenv.settings.HttpLimits.unfinished_bytes`),
  and by the connections of one client address (:attr:`~openenv.settings.HttpLimits.
  unfinished_bytes_per_client`). A connection whose unfinished message would take more is
  closed with 1009 (its bytes freed), never grown; connections whose messages complete
  release what they held at once.

What a client may rely on: a message sent at the speed of its connection always completes
(the budget refuses only when other unfinished messages hold it), and the close code says
which bound it met. The budget is one per process: with ``--workers N`` the server's is N times it.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import mmap
import sys
from typing import Any

from openenv.observability.metrics import process_gauge

__all__ = ["RECEIVE_BUDGET", "ReceiveBudget", "Unfinished", "release_pages"]


class Unfinished:
    """One connection's share of the budget: the bytes its unfinished message holds now."""

    __slots__ = ("client", "held")

    def __init__(self, client: str) -> None:
        self.client = client
        self.held = 0


class ReceiveBudget:
    """Bytes of unfinished messages held by a process's connections, in all and per client
    address (see the module's text). Counts only: the listeners hold the bytes."""

    def __init__(self) -> None:
        self.held = 0
        self.peak = 0
        self._per_client: dict[str, int] = {}
        #: Connections closed because the budget was spent (1009), and for a message not
        #: finished in time (1008): ``/metrics`` reports both.
        self.refused_total = 0
        self.expired_total = 0
        self._released = 0  # bytes released since the last trim
        self._trim: asyncio.TimerHandle | None = None

    def held_by(self, client: str) -> int:
        return self._per_client.get(client, 0)

    def hold(self, account: Unfinished, size: int, total: int, per_client: int) -> str | None:
        """Make ``account`` hold ``size`` bytes (its unfinished message's, 0 when none is).
        Returns why it may not (the budget is spent; the account is then released) or None."""
        delta = size - account.held
        if delta > 0:
            mine = self._per_client.get(account.client, 0)
            if mine + delta > per_client:
                self.release(account)
                self.refused_total += 1
                return f"unfinished messages from this client exceed {per_client} bytes"
            if self.held + delta > total:
                self.release(account)
                self.refused_total += 1
                return f"the server's budget for unfinished messages ({total} bytes) is spent"
        if delta:
            self._add(account.client, delta)
            account.held = size
        return None

    def release(self, account: Unfinished) -> None:
        """``account`` holds nothing (its message completed, or its connection is gone)."""
        if account.held:
            self._add(account.client, -account.held)
            self._released += account.held
            account.held = 0
            if self._released >= TRIM_AFTER_BYTES and self._trim is None:
                self._trim_soon()

    def _trim_soon(self) -> None:
        """Give freed memory back to the OS shortly (once per :data:`TRIM_INTERVAL_S` at most):
        the buffers of dropped messages are freed into the allocator, which keeps them (glibc
        raises its mmap threshold after large frees, so they come from the heap), and a burst
        of refused messages would otherwise stay in the process's resident memory."""
        if _malloc_trim is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._trim = loop.call_later(TRIM_INTERVAL_S, self._do_trim)

    def _do_trim(self) -> None:
        self._trim = None
        self._released = 0
        if _malloc_trim is not None:
            _malloc_trim(0)

    def _add(self, client: str, delta: int) -> None:
        self.held += delta
        self.peak = max(self.peak, self.held)
        n = self._per_client.get(client, 0) + delta
        if n:
            self._per_client[client] = n
        else:
            self._per_client.pop(client, None)


TRIM_AFTER_BYTES = 8 * 1024 * 1024
"""Bytes of unfinished messages released after which freed memory is given back to the OS."""
TRIM_INTERVAL_S = 0.5


def _libc_malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (None elsewhere: musl, macOS, Windows give memory back themselves
    or offer no such call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_malloc_trim = _libc_malloc_trim()


def _libc_madvise() -> Any:
    """``madvise`` (Linux only: ``MADV_DONTNEED`` frees a private page at once, its next use
    reads zeros; None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return madvise


_madvise = _libc_madvise()
_MADV_DONTNEED = 4
_PAGE = mmap.PAGESIZE


def release_pages(view: memoryview) -> int:
    """Give the OS back the whole pages inside ``view``, a writable buffer whose contents no
    longer matter (the next writer fills it again; until then its pages read as zeros): its
    resident memory, not its allocation. Returns the bytes given back (0 where madvise is not
    available or the view spans no whole page)."""
    if _madvise is None or view.readonly or not view.nbytes:
        return 0
    anchor = ctypes.c_char.from_buffer(view)
    start = ctypes.addressof(anchor)
    del anchor  # the view stays exported only while its address is read
    first = (start + _PAGE - 1) & ~(_PAGE - 1)
    end = (start + view.nbytes) & ~(_PAGE - 1)
    if end <= first or _madvise(first, end - first, _MADV_DONTNEED) != 0:
        return 0
    return end - first


RECEIVE_BUDGET = ReceiveBudget()
"""The process's budget: every WebSocket listener of the process charges it."""

process_gauge(
    "openenv_unfinished_message_bytes",
    "Bytes of unfinished WebSocket messages the process's connections hold now (HttpLimits.unfinished_bytes).",
    lambda: RECEIVE_BUDGET.held,
)
process_gauge(
    "openenv_unfinished_message_refusals",
    "Connections closed (1009) because unfinished messages would exceed the budget.",
    lambda: RECEIVE_BUDGET.refused_total,
    "counter",
)
process_gauge(
    "openenv_unfinished_message_expirations",
    "Connections closed (1008) because a message was not complete in time.",
    lambda: RECEIVE_BUDGET.expired_total,
    "counter",
)
