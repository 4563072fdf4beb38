"""Chromium for the browser environment: a few browser processes shared by every session.

Playwright's sync API belongs to the thread that started it, and a server's environment hooks
run in whichever worker thread is free. So each :class:`Lane` is one thread owning one
Playwright driver and one Chromium; a session is pinned to a lane and runs every browser
operation there (:meth:`Lane.call`). Each session gets its own browser context (cookies,
storage, pages), so sessions never see each other's pages. Lanes are created on first use, one
per process: :func:`lane_for` places a session on the lane with the fewest sessions.

A Chromium that crashed or was killed is launched again by the next call on its lane; the
contexts of the dead one are gone, which the sessions that owned them notice
(:attr:`Lane.generation` changed) and report (their episode ends; a reset starts afresh).

Chromium is Debian's (``/usr/bin/chromium``, or ``$BROWSER_ENV_CHROMIUM``): Playwright never
downloads a browser here. It runs headless, without its own sandbox (a container's user has no
namespaces to give it; the server's container is the boundary), with ``/dev/shm`` unused
(Docker's is 64 MiB).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BrowserUnavailable", "Lane", "chromium_path", "lane_for", "shutdown"]

T = TypeVar("T")
log = logging.getLogger(__name__)

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium")
LANES = max(1, int(os.environ.get("BROWSER_ENV_BROWSERS", "2")))
"""How many Chromium processes (each with its own thread) a server runs at most."""
STUCK_S = float(os.environ.get("BROWSER_ENV_STUCK_S", "45"))
"""A browser call running longer than this is stuck (a starved or wedged Chromium): the lane's
watchdog kills that Chromium, the call fails, and the next call starts a new one (the episodes
it held end, as after a crash)."""
LAUNCH_ARGS = (
    # BrowserGym's: scrollbars visible in screenshots.
    "--disable-features=OverlayScrollbars,ExtendedOverlayScrollbars",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--mute-audio",
)


class BrowserUnavailable(RuntimeError):
    """Chromium is not installed, or could not be started."""


def chromium_path() -> str | None:
    """The Chromium executable used: ``$BROWSER_ENV_CHROMIUM``, else Debian's."""
    env = os.environ.get("BROWSER_ENV_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for c in CHROMIUM_CANDIDATES:
        if os.access(c, os.X_OK):
            return c
    return shutil.which("chromium")


class Lane:
    """One thread owning one Playwright driver and one Chromium process."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.sessions = 0
        """Sessions placed on this lane (for placement)."""
        self.generation = 0
        """Incremented at every (re)launch of Chromium: contexts of an older generation are gone."""
        self.launches = 0
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._pw: Any = None
        self._browser: Any = None
        self._started: float | None = None  # when the running job started (monotonic), None when idle
        self.watchdog_kills = 0
        self._thread = threading.Thread(target=self._run, name=f"browser-env-lane-{index}", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch, name=f"browser-env-watchdog-{index}", daemon=True).start()

    # ------------------------------------------------------------------ the lane's thread

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            fn, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            self._started = time.monotonic()
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller, which re-raises it
                fut.set_exception(e)
            finally:
                self._started = None
        self._stop_browser()

    def _watch(self) -> None:
        killed_for: float | None = None  # the start of the call whose Chromium was killed
        while self._thread.is_alive():
            time.sleep(1.0)
            started = self._started
            if started is None or time.monotonic() - started <= STUCK_S:
                continue
            if killed_for != started:
                pid = self.browser_pid()
                if pid is not None:
                    log.warning(
                        "browser lane %d: a call has run for %.0f s: killing Chromium %d", self.index, STUCK_S, pid
                    )
                    self.watchdog_kills += 1
                    killed_for = started
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                    time.sleep(STUCK_S / 3)  # let the call fail before judging the lane again
                    continue
            if time.monotonic() - started > 2 * STUCK_S:
                # Still stuck after its Chromium died (or none was found: stuck launching one, or
                # in the driver itself): kill Playwright's driver, which fails every call waiting
                # on it; the lane's next call starts a new driver and a new Chromium.
                driver = self.driver_pid()
                if driver is not None:
                    log.warning("browser lane %d: a call is still stuck: killing the driver %d", self.index, driver)
                    self.watchdog_kills += 1
                    try:
                        os.kill(driver, signal.SIGKILL)
                    except OSError:
                        pass
                killed_for = started
                time.sleep(STUCK_S / 3)

    def _stop_browser(self) -> None:
        for closer in (getattr(self._browser, "close", None), getattr(self._pw, "stop", None)):
            if closer is not None:
                try:
                    closer()
                except Exception:  # noqa: BLE001 - stopping what may be dead already
                    pass
        self._browser = self._pw = None

    def browser(self) -> Any:
        """The lane's Chromium, launched (again) when it is not running. Lane thread only."""
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        path = chromium_path()
        if path is None:
            raise BrowserUnavailable(
                "Chromium not found: install Debian's chromium (apt-get install chromium) or set BROWSER_ENV_CHROMIUM"
            )
        for attempt in (1, 2):
            try:
                if self._pw is None:
                    from browsergym.core.constants import BROWSERGYM_ID_ATTRIBUTE
                    from playwright.sync_api import sync_playwright

                    self._pw = sync_playwright().start()
                    # BrowserGym's element ids ("bid") are what get_by_test_id finds.
                    self._pw.selectors.set_test_id_attribute(BROWSERGYM_ID_ATTRIBUTE)
                self._browser = self._pw.chromium.launch(
                    executable_path=path,
                    headless=True,
                    args=list(LAUNCH_ARGS),
                    ignore_default_args=["--hide-scrollbars"],
                    timeout=60_000,
                )
                break
            except Exception as e:  # a dead driver cannot launch: start a new one once
                self._stop_browser()
                if attempt == 2:
                    raise BrowserUnavailable(f"could not start Chromium ({path}): {e}") from e
        self.generation += 1
        self.launches += 1
        return self._browser

    def driver_pid(self) -> int | None:
        """The process id of the lane's Playwright driver (node), or None."""
        proc = getattr(getattr(getattr(self._pw, "_impl_obj", None), "_connection", None), "_transport", None)
        pid = getattr(getattr(proc, "_proc", None), "pid", None)
        return int(pid) if pid is not None else None

    def browser_pid(self) -> int | None:
        """The process id of the lane's Chromium (Linux; for tests and diagnostics), or None."""
        driver = self.driver_pid()
        if driver is None:
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[1]) == driver and "chrom" in stat[stat.find("(") + 1 : stat.rfind(")")]:
                return int(entry)
        return None

    # ------------------------------------------------------------------ any thread

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the lane's thread and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            return fn()
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=10)


_lanes: list[Lane] = []
_lock = threading.Lock()


def lane_for() -> Lane:
    """A lane for a new session: a new one while fewer than :data:`LANES` exist, else the
    least loaded. The caller decrements ``lane.sessions`` when its session ends."""
    with _lock:
        idle = [lane for lane in _lanes if lane.sessions == 0]
        if idle:
            lane = idle[0]
        elif len(_lanes) < LANES:
            lane = Lane(len(_lanes))
            _lanes.append(lane)
        else:
            lane = min(_lanes, key=lambda x: x.sessions)
        lane.sessions += 1
        return lane


def release(lane: Lane) -> None:
    with _lock:
        lane.sessions = max(0, lane.sessions - 1)


@atexit.register
def shutdown() -> None:
    """Close every lane's Chromium and driver (at exit)."""
    with _lock:
        lanes = list(_lanes)
        _lanes.clear()
    for lane in lanes:
        lane.stop()
