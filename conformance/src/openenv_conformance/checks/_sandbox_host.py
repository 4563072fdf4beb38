"""What the certifier observes on its own host for the ``sandbox`` level, when the target runs
there (``python:`` targets and other servers the suite started): canary sockets that code in
the sandbox must not reach, and the host's processes and SysV IPC objects, which nothing of a
call may leave behind. Linux only (``/proc``); elsewhere the observations are skipped."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import tempfile
import threading
import time
from collections.abc import Iterable

__all__ = ["Canary", "host_observable", "processes_named", "sysv_shm_rows"]


def host_observable() -> bool:
    """Whether this host has the ``/proc`` the observations read."""
    return os.path.isdir("/proc/self")


#: How long a canary waits for another certification's canary on this host to close.
CANARY_LOCK_WAIT_S = 600.0


def _host_lock(path: str) -> int | None:
    """An exclusive lock on ``path`` (created world-writable), held until its descriptor closes:
    one canary at a time on a host. Two certifications on one host would otherwise see each
    other's canaries: a sandbox that wrongly shows the host's /tmp, probed in one, reaches the
    canary of the other, which then fails a sandbox that did nothing wrong. Waits up to
    :data:`CANARY_LOCK_WAIT_S`; None (no lock, as before) if it cannot be had."""
    import fcntl
    import stat

    # Never through a symlink, and chmod only a file this call created: /tmp is everyone's, and a
    # root certifier following a planted link would chmod its target.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # another user's certification may take it next
    except FileExistsError:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return None
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    deadline = time.monotonic() + CANARY_LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.1)
        except OSError:
            os.close(fd)
            return None


class Canary:
    """A world-writable pathname UNIX socket under /tmp and a TCP socket on 127.0.0.1, each
    listening and recording who connects (a thread accepts). ``hits`` lists what was reached;
    :meth:`close` removes both."""

    def __init__(self) -> None:
        base = "/tmp" if os.access("/tmp", os.W_OK | os.X_OK) else tempfile.gettempdir()
        self._lock_fd = _host_lock(os.path.join(base, "openenv-certify-canary.lock"))
        self.dir = tempfile.mkdtemp(prefix="openenv-certify-canary-", dir=base)
        os.chmod(self.dir, 0o755)
        self.path = os.path.join(self.dir, "canary.sock")
        self.hits: list[str] = []
        self._lock = threading.Lock()
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix.bind(self.path)
        os.chmod(self.path, 0o777)
        self._unix.listen(64)
        self._tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._tcp.bind(("127.0.0.1", 0))
        self._tcp.listen(64)
        self.port = int(self._tcp.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="openenv-certify-canary", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        socks = {self._unix.fileno(): ("unix", self._unix), self._tcp.fileno(): ("tcp", self._tcp)}
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select(list(socks), [], [], 0.1)
            except (OSError, ValueError):
                return
            for fd in ready:
                kind, s = socks[fd]
                try:
                    conn, _ = s.accept()
                except OSError:
                    continue
                conn.close()
                with self._lock:
                    self.hits.append(f"{self.path}" if kind == "unix" else f"127.0.0.1:{self.port}")

    def reached(self, wait: float = 0.5) -> list[str]:
        """What was reached so far, after letting pending connections be accepted."""
        if wait > 0:
            time.sleep(wait)
        with self._lock:
            return list(self.hits)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for s in (self._unix, self._tcp):
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)  # releases the host-wide lock
            self._lock_fd = None

    def __enter__(self) -> Canary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def processes_named(markers: Iterable[str]) -> list[str]:
    """The host's processes whose command line contains one of ``markers`` or whose name
    (``comm``) equals one: ``"PID command"``."""
    marks = [m for m in markers if m]
    out = []
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if any(m in cmd or m == comm for m in marks):
            out.append(f"{name} {(cmd or '[' + comm + ']')[:160]}")
    return out


def sysv_shm_rows() -> list[dict[str, str]]:
    """The host's SysV shared memory segments (its IPC namespace's ``/proc/sysvipc/shm``), as
    rows keyed by the file's header."""
    try:
        with open("/proc/sysvipc/shm") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    if not lines:
        return []
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:] if line.strip()]
