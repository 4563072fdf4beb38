"""The ``local`` provider: N ``openenv serve`` processes on this machine.

The baseline of the others and their test double, with real processes: each server is its own
process (its own session manager, its own port on 127.0.0.1), started detached from the caller
so that ``openenv fleet up`` can return and ``openenv fleet down`` stop them later.

::

    with LocalProvider("echo_env:EchoEnvironment", max_sessions=256) as p:
        endpoints = p.up(4)
        ...                       # FleetClient(p) places sessions across them
        p.kill(endpoints[0].name) # SIGKILL one (tests, drills)
        p.heal()                  # start a replacement
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.client.health import check_health
from openenv.errors import DeadlineExceeded, NotFound, Unavailable
from openenv.fleet.provider import Endpoint, Progress, Provider, _quiet
from openenv.security import TOKEN_ENV

__all__ = ["LocalProvider"]


def _start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` ("" when it is gone): tells a live server from a
    reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class _Proc:
    def __init__(self, name: str, pid: int, start: str, url: str, log: str) -> None:
        self.name, self.pid, self.start, self.url, self.log = name, pid, start, url, log
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            return False
        return bool(self.start) and _start_time(self.pid) == self.start

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "start": self.start, "url": self.url, "log": self.log}


class LocalProvider(Provider):
    """Servers of ``target`` (``module:Class``, as ``openenv serve`` takes it) as local processes.

    ``max_sessions`` is each server's capacity (default: the environment's); ``serve_args``
    are more ``openenv serve`` options; ``env`` adds environment variables; ``cwd`` is where
    the servers run (``target`` is imported from there too). ``token``: every server requires
    it (RFC 0003; given in the servers' environment, not their command line, which any local
    user can read) and the endpoints carry it; it is not written to :meth:`state`.
    """

    kind = "local"

    def __init__(
        self,
        target: str,
        *,
        max_sessions: int | None = None,
        serve_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        ready_timeout: float = 60.0,
        state_dir: str | None = None,
        token: str | None = None,
    ) -> None:
        self.target = target
        self.token = token
        self.max_sessions = max_sessions
        self.serve_args = list(serve_args)
        self.env = dict(env or {})
        self.cwd = cwd or os.getcwd()
        self.ready_timeout = ready_timeout
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="openenv-fleet-")
        self._procs: list[_Proc] = []
        self._serial = 0

    # ------------------------------------------------------------------ lifecycle

    def _command(self, ready_file: str) -> list[str]:
        cmd = [sys.executable, "-m", "openenv.cli", "serve", self.target, "--port", "0", "--no-http"]
        cmd += ["--ready-file", ready_file]
        if self.max_sessions is not None:
            cmd += ["--max-sessions", str(self.max_sessions)]
        return cmd + self.serve_args

    def _spawn(self) -> tuple[_Proc, str]:
        name = f"local-{self._serial}"
        self._serial += 1
        ready = os.path.join(self.state_dir, f"{name}.ready")
        log = os.path.join(self.state_dir, f"{name}.log")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ready)
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                self._command(ready),
                cwd=self.cwd,
                env={**os.environ, **self.env, **({TOKEN_ENV: self.token} if self.token else {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives `openenv fleet up`; not hit by the caller's Ctrl-C
            )
        proc = _Proc(name, popen.pid, _start_time(popen.pid), "", log)
        proc.popen = popen
        return proc, ready

    def _wait_ready(self, proc: _Proc, ready: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not proc.alive:
                raise Unavailable(f"server {proc.name} exited before serving:\n{_tail(proc.log)}")
            if os.path.exists(ready):
                address = Path(ready).read_text().strip()
                proc.url = address if "://" in address else f"grpc://{address}"
                target = proc.url.split("://", 1)[1]
                if check_health(target, "", 5.0) == "SERVING":
                    return
            time.sleep(0.05)
        raise DeadlineExceeded(f"server {proc.name} not SERVING within {self.ready_timeout:g} s:\n{_tail(proc.log)}")

    def _start(self, n: int, progress: Progress, total: int, done: int = 0) -> list[_Proc]:
        started = [self._spawn() for _ in range(n)]  # all start at once; then wait for each
        deadline = time.monotonic() + self.ready_timeout
        out: list[_Proc] = []
        try:
            for proc, ready in started:
                self._wait_ready(proc, ready, deadline)
                out.append(proc)
                done += 1
                progress(f"server {done}/{total} {proc.name} serving at {proc.url} (pid {proc.pid})")
        except BaseException:
            for proc, _ in started:
                _terminate(proc)
                _stop(proc, 5.0)
            raise
        return out

    def up(self, replicas: int, progress: Progress = _quiet) -> list[Endpoint]:
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        progress(f"starting {replicas} local server(s) of {self.target}")
        self._procs += self._start(replicas, progress, replicas)
        return self.endpoints()

    def endpoints(self) -> list[Endpoint]:
        return [Endpoint(p.name, p.url, f"pid {p.pid}", self.token or "") for p in self._procs if p.alive and p.url]

    def heal(self, progress: Progress = _quiet) -> list[Endpoint]:
        dead = [p for p in self._procs if not p.alive]
        if dead:
            progress(f"replacing {len(dead)} dead server(s): {', '.join(p.name for p in dead)}")
            self._procs = [p for p in self._procs if p.alive]
            self._procs += self._start(len(dead), progress, len(dead))
        return self.endpoints()

    def kill(self, name: str) -> None:
        """SIGKILL server ``name`` (no drain): what a crash looks like to its clients."""
        for p in self._procs:
            if p.name == name:
                with contextlib.suppress(ProcessLookupError):
                    if p.alive:
                        os.kill(p.pid, signal.SIGKILL)
                if p.popen is not None:
                    p.popen.wait(30)
                return
        raise NotFound(f"no server {name!r} in this fleet")

    def down(self, progress: Progress = _quiet, grace_s: float = 10.0) -> None:
        procs, self._procs = self._procs, []
        for p in procs:
            _terminate(p)  # graceful: each server drains its sessions, all at once
        for p in procs:
            _stop(p, grace_s)
            progress(f"stopped {p.name}")

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "max_sessions": self.max_sessions,
            "cwd": self.cwd,
            "state_dir": self.state_dir,
            "serial": self._serial,
            "servers": [p.to_json() for p in self._procs],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> LocalProvider:
        p = cls(
            str(state["target"]),
            max_sessions=state.get("max_sessions"),
            cwd=state.get("cwd"),
            state_dir=state.get("state_dir"),
        )
        p._serial = int(state.get("serial", 0))
        p._procs = [_Proc(s["name"], int(s["pid"]), s["start"], s["url"], s["log"]) for s in state.get("servers", [])]
        return p


def _tail(path: str, lines: int = 40) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _terminate(p: _Proc) -> None:
    if p.alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)


def _stop(p: _Proc, grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``p`` to exit after SIGTERM, then SIGKILL it; reap it."""
    deadline = time.monotonic() + grace_s
    while p.alive and time.monotonic() < deadline:
        if p.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(0.05)
        else:
            time.sleep(0.05)
    if p.alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    if p.popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.popen.wait(30)
