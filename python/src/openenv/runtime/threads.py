"""The worker threads of environments' sync hooks, with a light hand-off.

A sync ``reset``/``step`` (``run_in_thread = True``, the default) runs off the event loop so
that a slow call delays only its own session. ``loop.run_in_executor`` does that through a
``concurrent.futures`` future chained to an asyncio one, a work item, a lock and a semaphore
per call; here a call is one queue put and one ``call_soon_threadsafe`` back, which is what the
hop itself needs (docs/performance.md measures both in ``make bench``).

What callers may rely on: threads start on demand, never more than ``max_workers`` and never
more than calls in flight plus idle ones; a call's exception is the future's; a future
cancelled by its caller drops its result; :meth:`shutdown` cancels calls not started. The
threads are daemons: a hung environment call never keeps the process from exiting.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["EnvThreads"]

_T = TypeVar("_T")
_Item = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _deliver(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():  # cancelled by its caller meanwhile
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class EnvThreads:
    """A bounded set of daemon threads running sync callables for an event loop."""

    _ids = itertools.count(1)

    def __init__(self, max_workers: int, name_prefix: str = "openenv-env") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self.max_workers = max_workers
        self._prefix = name_prefix
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    @property
    def threads(self) -> int:
        """Threads started so far (they stay until :meth:`shutdown`)."""
        return len(self._threads)

    def submit(self, fn: Callable[[], _T]) -> asyncio.Future[_T]:
        """Run ``fn()`` on a worker thread; its outcome becomes the returned future's (on the
        running loop)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_T] = loop.create_future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("the environment threads are shut down")
            if self._idle:
                self._idle -= 1  # that idle thread takes this call
                spawn = False
            else:
                spawn = len(self._threads) < self.max_workers
                if spawn:
                    t = threading.Thread(target=self._work, name=f"{self._prefix}_{next(self._ids)}", daemon=True)
                    self._threads.append(t)
        self._queue.put((fn, fut, loop))
        if spawn:
            t.start()
        return fut

    def _work(self) -> None:
        q = self._queue
        while True:
            item = q.get()
            if item is None:
                return
            fn, fut, loop = item
            ran = not fut.cancelled()
            if ran:
                try:
                    ok, value = True, fn()
                except BaseException as e:  # noqa: BLE001 - the caller's future carries it
                    ok, value = False, e
            with self._lock:  # idle before the caller hears back: its next call finds this thread
                self._idle += 1
            if ran:
                try:
                    loop.call_soon_threadsafe(_deliver, fut, ok, value)
                except RuntimeError:  # the loop is closed: nobody waits for this result
                    pass
            del item, fn, fut, loop

    def shutdown(self) -> None:
        """Stop the threads once their current call returns; calls not started are cancelled."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            n = len(self._threads)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                _, fut, loop = item
                try:
                    loop.call_soon_threadsafe(fut.cancel)
                except RuntimeError:
                    pass
        for _ in range(n):
            self._queue.put(None)
