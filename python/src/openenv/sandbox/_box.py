"""The server's side of a sandbox: start it, send it calls, read what they print and return.

A :class:`Sandbox` is one session's sandbox: bubblewrap (user, mount, PID, IPC, network and UTS
namespaces; the view of :mod:`openenv.sandbox._layout`) around the supervisor
(:mod:`openenv.sandbox._supervisor`), started on first use and kept for the session, so the
workspace persists between calls of an episode while every call's processes, IPC objects and
temporary files do not. Calls are sequential (a lock); outputs come back on pipes, read up to a
cap, after which the pipe is closed (the writer gets EPIPE). ``function`` calls are graded in
lock step: each case's arguments go to the call's process only after the previous answer came
back, tagged with a nonce the answer must echo, so nothing the code writes ahead of time counts.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.errors import Unavailable
from openenv.sandbox import _layout

__all__ = [
    "REQUIRED",
    "CaseResult",
    "FunctionResult",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
]

#: The layers a sandbox must have by default (each matched as a prefix of a layer's name).
REQUIRED: tuple[str, ...] = (
    "user-namespace",
    "pid-namespace",
    "ipc-namespace",
    "network-namespace",
    "mount-namespace",
    "minimal-root",
    "no-user-namespaces",
    "disk-quota",
    "memory",
    "rlimits",
    "no-capabilities",
    "no-new-privs",
    "landlock",
    "seccomp",
)
#: Environment variable naming layers an operator accepts to be missing (comma-separated).
ALLOW_MISSING_ENV = "OPENENV_SANDBOX_ALLOW_MISSING"
_HERE = Path(__file__).resolve().parent
_START_TIMEOUT_S = 60.0
_GRACE_S = 15.0  # beyond a call's wall time, before the server gives up on its supervisor
_MAX_ANSWER = 4 * 1024 * 1024  # one function call's answer line
_DRAIN_S = 2.0  # after a call: how long its output pipes may take to reach their end


class SandboxUnavailable(Unavailable):
    """The machine cannot confine code as required: a missing layer, a missing tool, or a
    secret path visible inside the sandbox. Raised before any submitted code runs."""


class SandboxError(RuntimeError):
    """The sandbox failed during a call (its supervisor died or stopped answering). The
    sandbox is restarted on the next call; the workspace's files are lost."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-call limits (``disk_bytes`` and ``files`` are the session's, shared by its calls).

    Attributes:
        wall_s: wall-clock seconds per call; then every process of the call is killed.
        cpu_s: CPU seconds per process (RLIMIT_CPU).
        memory_bytes: resident memory of all the call's processes together (watched by the
            supervisor every 10 ms, PSS when the sum of resident sets is over) and the address
            space of each one (RLIMIT_AS).
        processes: processes and threads of the call together (RLIMIT_NPROC in the sandbox's
            own user namespace).
        disk_bytes: bytes of the session's writable space: the workspace, ``/tmp`` and
            ``/dev/shm`` share one tmpfs of this size; also the largest file (RLIMIT_FSIZE).
        files: files and directories in that space (the tmpfs's inodes).
        open_files: open files per process (RLIMIT_NOFILE).
        output_bytes: stdout and stderr are each read up to this; then the pipe is closed.
    """

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_bytes: int = 512 * 1024 * 1024
    processes: int = 16
    disk_bytes: int = 64 * 1024 * 1024
    files: int = 4096
    open_files: int = 64
    output_bytes: int = 64 * 1024

    def supervisor(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "memory_bytes": self.memory_bytes,
            "processes": self.processes,
            "disk_bytes": self.disk_bytes,
            "open_files": self.open_files,
        }


@dataclasses.dataclass
class RunResult:
    """What one call did.

    Attributes:
        stdout, stderr: what it printed (each cut at ``Limits.output_bytes``, with a note).
        exit_code: its first process's exit status; negative: killed by that signal (-9 also
            when a limit killed it).
        time_s: wall time of the call.
        timed_out: the wall-clock limit ended it.
        killed: ``"memory"`` when the memory limit ended it, else None.
        isolation: the layers in force.
        peak_memory_bytes: the most resident memory the call's processes held together, as
            sampled every 10 ms (None without the memory watchdog).
        limit: which of the call's limits it met, for the agent to read in the tool's result
            (:data:`LIMITS`): ``"memory"`` (killed: its processes held more than
            ``memory_bytes`` together), ``"time"`` (killed at ``wall_s``), ``"cpu"`` (a process
            killed by SIGXCPU at ``cpu_s``), ``"processes"`` (it ended on a process or thread
            refused at ``processes``), else None. An uncaught ``MemoryError`` (the per-process
            address-space limit) is ``"memory"`` too. The last two are read from how the call
            ended (its exit status and the last line of its stderr, Python's traceback): the
            kernel reports a refused fork only to the caller, and RLIMIT_NPROC also counts the
            sandbox's own processes, so counting the call's cannot tell.
    """

    stdout: str
    stderr: str
    exit_code: int
    time_s: float
    timed_out: bool
    killed: str | None
    isolation: list[str]
    peak_memory_bytes: int | None = None
    limit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What a tool returns to the agent: output, exit code, time, ``timed_out``, and
        ``limit`` (which limit the call met, None when none) with ``limit_note`` (a sentence
        saying what happened, for a model to read; absent when no limit was met)."""
        out: dict[str, Any] = {
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "time_s": round(self.time_s, 4),
            "timed_out": self.timed_out,
            "limit": self.limit,
        }
        if self.limit is not None:
            out["limit_note"] = LIMITS[self.limit]
        return out


LIMITS = {
    "memory": "killed: its processes used more memory together than the sandbox allows",
    "time": "killed: it ran longer than the sandbox's time limit",
    "cpu": "killed: a process used more CPU time than the sandbox allows (SIGXCPU)",
    "processes": "ended: a new process or thread was refused, at the sandbox's limit on processes and threads",
}
"""The limits a call may meet (:attr:`RunResult.limit`) and what the agent is told of each."""


def limit_met(done: Mapping[str, Any], stderr: str) -> str | None:
    """Which limit a call met, from the supervisor's ``done`` answer and the call's stderr (the
    first that applies): ``memory`` when the memory watchdog killed it, or when it ended with an
    uncaught ``MemoryError`` (the address-space limit refused an allocation: the last line of
    its traceback); ``cpu`` when SIGXCPU killed it; ``time`` when the wall clock ended it;
    ``processes`` when it ended with an uncaught refusal of a new process (``fork``, ``clone``:
    EAGAIN) or thread."""
    if done.get("killed") == "memory":
        return "memory"
    code = int(done.get("exit_code") or 0)
    last = _last_line(stderr) if code == 1 else ""
    if last.startswith("MemoryError"):
        return "memory"
    if last.startswith(_TASK_REFUSED):
        return "processes"
    if code == -signal.SIGXCPU:
        return "cpu"
    if done.get("timed_out"):
        return "time"
    return None


#: How Python reports a process (os.fork, subprocess: EAGAIN) or a thread the kernel refused.
_TASK_REFUSED = ("BlockingIOError: [Errno 11]", "RuntimeError: can't start new thread")


def _last_line(text: str) -> str:
    lines = text.rstrip().rsplit("\n", 1)
    return lines[-1] if lines else ""


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One case of a ``function`` call: the returned value (JSON-shaped: tuples as lists, sets
    sorted, other objects as ``{"__repr__": ...}``) or the error it raised; neither when the
    call ended before answering it."""

    value: Any = None
    error: str | None = None
    answered: bool = False


@dataclasses.dataclass
class FunctionResult(RunResult):
    """A ``function`` call: ``load_error`` when the code did not load or define the function,
    else one :class:`CaseResult` per case, in order."""

    load_error: str | None = None
    cases: list[CaseResult] = dataclasses.field(default_factory=list)


def _allowed_missing(allow_missing: Iterable[str] | None) -> frozenset[str]:
    names = set(allow_missing or ())
    names.update(n.strip() for n in os.environ.get(ALLOW_MISSING_ENV, "").split(",") if n.strip())
    return frozenset(names)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _send(sock: socket.socket, msg: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(msg).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def _recv(sock: socket.socket, timeout: float | None) -> dict[str, Any] | None:
    sock.settimeout(timeout)
    try:
        data = sock.recv(1 << 20)
    except TimeoutError:
        raise
    except OSError:
        return None
    if not data:
        return None
    msg: dict[str, Any] = json.loads(data)
    return msg


def _text(data: bytes | bytearray, truncated: bool) -> str:
    text = bytes(data).decode("utf-8", errors="replace")
    return text + ("\n[output truncated]" if truncated else "")


class Sandbox:
    """One session's sandbox (see the module docstring for what it is and guarantees).

    Args:
        limits: the default :class:`Limits` of its calls.
        require: the layers every call must have (default :data:`REQUIRED`); a prefix of a
            layer's name matches it (``"landlock"`` matches ``"landlock-abi6"``).
        allow_missing: required layers the operator accepts to be missing, also read from
            ``$OPENENV_SANDBOX_ALLOW_MISSING`` (comma-separated). Without them a machine that
            lacks a required layer raises :class:`SandboxUnavailable` before any code runs.
        secrets: paths that must not be visible inside the sandbox (the environment's package,
            its data, its answers): checked from inside when the sandbox starts; one that is
            visible raises :class:`SandboxUnavailable`. Their directories are also hidden.
        hide: more directories to cover with an empty one inside the sandbox.
        readable: more host directories to mount read-only (e.g. a dataset the code may read).
        links: symbolic links to make in the view, ``{link: target}``, e.g. ``{"/app": "/workspace"}``
            (a task's working directory) or ``{"/tests": "/tmp/tests"}`` (a path that exists only
            while one call has made it, since ``/tmp`` is emptied after every call). Each link is a
            new absolute path outside the view's mounts.
        python: the sandbox's interpreter (default: the server's base interpreter, else the
            system's ``python3``).
        env: the environment variables of the code (default: PATH, HOME, TMPDIR, LANG).

    Thread-safe; calls run one at a time. :meth:`close` ends it (also on garbage collection).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        require: Sequence[str] | None = None,
        allow_missing: Iterable[str] | None = None,
        secrets: Iterable[str | os.PathLike[str]] = (),
        hide: Iterable[str | os.PathLike[str]] = (),
        readable: Iterable[str | os.PathLike[str]] = (),
        links: Mapping[str, str] | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.require = tuple(REQUIRED if require is None else require)
        self.allow_missing = _allowed_missing(allow_missing)
        self.secrets = tuple(os.path.realpath(p) for p in secrets)
        self._hide = tuple(os.fspath(p) for p in hide) + tuple(
            p if os.path.isdir(p) else os.path.dirname(p) for p in self.secrets
        )
        self._readable = tuple(os.fspath(p) for p in readable)
        self._links = dict(links or {})
        self._python = python
        self.env = dict(
            env
            or {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": _layout.WORKSPACE,
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        self.isolation: list[str] = []
        self.info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._init_pid = 0
        self._call_layers: list[str] = []
        self._closed = False

    # -- lifecycle

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._stop()

    def start(self) -> list[str]:
        """Start the sandbox now (calls start it when needed); returns the layers in force.

        Raises:
            SandboxUnavailable: a required layer is missing (and not allowed to be), bubblewrap
                or an interpreter is missing, or a secret path is visible inside.
        """
        with self._lock:
            self._ensure()
            return list(self.isolation)

    def close(self) -> None:
        """End the sandbox: every process in it, its workspace and its memory."""
        with self._lock:
            self._closed = True
            self._stop()

    def _stop(self) -> None:
        sock, proc, init = self._sock, self._proc, self._init_pid
        self._sock = self._proc = None
        self._init_pid = 0
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()  # the supervisor reads EOF and exits: the namespace dies with it
        if proc is not None:
            try:
                _wait(proc, 2.0)
            except subprocess.TimeoutExpired:
                if init:
                    with contextlib.suppress(OSError):
                        os.kill(init, signal.SIGKILL)  # PID 1 of the namespace: all of it
                with contextlib.suppress(OSError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)

    def _ensure(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._proc is not None and self._proc.poll() is None and self._sock is not None:
            return
        self._stop()
        self._launch()

    # -- starting

    def _outer_uid(self) -> int | None:
        """As root, the sandbox runs as a uid of its own (never root outside); else as us."""
        if os.geteuid() != 0:
            return None
        base = int(os.environ.get("OPENENV_SANDBOX_UID_BASE", "1000000000"))
        return base + secrets.randbelow(1 << 24)

    def _launch(self) -> None:
        bwrap = _layout.bwrap_path()
        if bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                "bubblewrap); the sandbox needs it to give submitted code a private view of the machine"
            )
        uid = self._outer_uid()
        interp = _layout.find_interpreter(self._python, uid)
        if interp is None:
            who = f"uid {uid}" if uid is not None else "this user"
            raise SandboxUnavailable(f"no Python interpreter that {who} can run (tried the server's and python3)")
        view = _layout.view_for(interp, self._hide, self._readable, self._links)
        errors: list[str] = []
        # A container without an unmasked /proc cannot mount a new one: then the sandbox has none
        # (no memory watchdog, no kernel limits on nested user namespaces and on IPC; seccomp
        # denies what they would have bounded).
        for proc in (True, False):
            try:
                self._spawn(bwrap, view, uid, proc=proc)
                break
            except _SpawnFailed as e:
                errors.append(str(e))
                if "proc" not in str(e):
                    raise SandboxUnavailable(_explain(str(e))) from None
        else:
            raise SandboxUnavailable(_explain(errors[-1]))
        ready = self.info
        probe = self._call_locked({"mode": "run"}, b"", b"", self.limits, None)
        if probe.exit_code != 0:
            self._stop()
            raise SandboxUnavailable(
                f"an empty call failed in the sandbox (exit {probe.exit_code}): {probe.stderr[-800:]}"
            )
        visible = ready.get("visible") or []
        if visible:
            self._stop()
            raise SandboxUnavailable(
                f"secret paths are visible inside the sandbox: {', '.join(visible)}; they are below a directory "
                "the sandbox mounts read-only (install the environment elsewhere, e.g. in a virtualenv, or pass "
                "its directory in `hide`)"
            )
        missing = [r for r in self.require if not any(x.startswith(r) for x in self.isolation)]
        missing = [m for m in missing if m not in self.allow_missing]
        if missing:
            self._stop()
            raise SandboxUnavailable(
                f"the sandbox lacks required layers {missing} (has {self.isolation}); "
                + _advice(missing)
                + f" To run code with a weaker sandbox anyway, set {ALLOW_MISSING_ENV}={','.join(missing)}."
            )

    def _spawn(self, bwrap: str, view: _layout.View, uid: int | None, *, proc: bool) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_r, info_w = os.pipe()
        data = {
            f"{_layout.OPENENV_DIR}/supervisor.py": (_HERE / "_supervisor.py").read_bytes(),
            f"{_layout.OPENENV_DIR}/_confine.py": (_HERE / "_confine.py").read_bytes(),
            "/etc/passwd": _layout.etc_passwd(),
            "/etc/group": _layout.etc_group(),
            "/etc/hosts": _layout.ETC_HOSTS,
        }
        data_fds = {path: _memfd(os.path.basename(path), content) for path, content in data.items()}
        argv = _layout.bwrap_argv(
            bwrap,
            view,
            data_fds=data_fds,
            ctl_fd=theirs.fileno(),
            info_fd=info_w,
            proc=proc,
            env=self.env,
        )
        if uid is not None:
            argv = _as_user(uid, view.interpreter.executable) + argv
        try:
            # No user=/group= here: they make subprocess fork() instead of vfork(), and a fork of
            # a process with gRPC threads runs gRPC's fork handlers, which may crash the child.
            p = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(), info_w, *data_fds.values()),
                start_new_session=True,
            )
        finally:
            theirs.close()
            os.close(info_w)
            for fd in data_fds.values():
                os.close(fd)
        try:
            limits = self.limits
            _send(
                ours,
                {
                    "op": "setup",
                    "namespaces": True,
                    "box": {"size": limits.disk_bytes, "inodes": limits.files},
                    "secrets": list(self.secrets),
                    "workspace": _layout.WORKSPACE,
                },
            )
            ready = _recv(ours, _START_TIMEOUT_S)
        except (OSError, TimeoutError):
            ready = None
        if ready is None or ready.get("op") != "ready":
            with contextlib.suppress(OSError):
                p.kill()
            err = b""
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                err = p.communicate(timeout=10)[1] or b""
            os.close(info_r)
            ours.close()
            detail = (ready or {}).get("error") or err.decode(errors="replace").strip()[-1500:]
            raise _SpawnFailed(detail or f"bubblewrap exited with status {p.returncode}")
        with os.fdopen(info_r, "rb") as f:
            with contextlib.suppress(ValueError):
                self._init_pid = int(json.loads(f.read() or b"{}").get("child-pid", 0))
        assert p.stderr is not None
        p.stderr.close()
        self._proc, self._sock = p, ours
        layers = [
            "user-namespace",
            "pid-namespace",
            "ipc-namespace",
            "network-namespace",
            "uts-namespace",
            "mount-namespace",
            "minimal-root",
        ]
        layers += list(ready.get("layers") or [])
        if ready.get("proc"):
            layers.append("memory-watchdog")
        layers.append("unprivileged-uid" if uid is not None or os.geteuid() != 0 else "root-uid")
        self.info = {**ready, "python": view.interpreter.executable, "proc": bool(ready.get("proc"))}
        self._view = view
        self._call_layers = []
        self.isolation = layers

    # -- calls

    def _call_required(self) -> list[str]:
        """The required layers a call's process applies itself (checked in it before the code runs)."""
        mine = ("rlimits", "no-capabilities", "no-new-privs", "landlock", "seccomp", "no-user-namespaces")
        return [r for r in self.require if r in mine]

    def run(self, code: str, *, stdin: bytes = b"", limits: Limits | None = None, isolated: bool = False) -> RunResult:
        """Run ``code`` as a Python script (``__name__ == "__main__"``) in the workspace.

        The workspace is first on ``sys.path``, as for any script run in its directory: a module
        there shadows the standard library's. ``isolated=True`` is for the environment's own
        programs (a grader, a copier of files) run where the agent's files are: then the
        workspace is not on the path, and a ``tarfile.py`` the agent left there is never
        imported in place of the real one. (It does not make the program's children safe: run
        them with :data:`VERIFIER_ENV`.)"""
        spec = {"mode": "run", "isolated": True} if isolated else {"mode": "run"}
        r = self._call(spec, code.encode(), stdin, limits or self.limits, None)
        assert isinstance(r, RunResult)
        return r

    def exec(self, argv: Sequence[str], *, stdin: bytes = b"", limits: Limits | None = None) -> RunResult:
        """Run a program (``argv[0]`` found on the sandbox's PATH) in the workspace."""
        if not argv:
            raise ValueError("argv is empty")
        r = self._call({"mode": "exec", "argv": [str(a) for a in argv]}, b"", stdin, limits or self.limits, None)
        assert isinstance(r, RunResult)
        return r

    def call_function(
        self,
        code: str,
        entry_point: str,
        cases: Iterable[Sequence[Any]],
        *,
        limits: Limits | None = None,
    ) -> FunctionResult:
        """Load ``code`` as a module and call ``entry_point(*args)`` for each case, in lock step.

        The code's process receives a case's arguments only when it has answered the previous
        case; an answer counts only with the nonce sent with its case. When the wall-clock
        limit ends the call, the cases not answered have ``answered=False``.
        """
        batch = [list(c) for c in cases]
        spec = {"mode": "function", "entry_point": entry_point}
        r = self._call(spec, code.encode(), b"", limits or self.limits, batch)
        assert isinstance(r, FunctionResult)
        return r

    def clear(self) -> None:
        """Empty the workspace (e.g. for a new episode); a sandbox not started yet has none."""
        with self._lock:
            if self._proc is None or self._sock is None or self._proc.poll() is not None:
                return
            try:
                _send(self._sock, {"op": "wipe"})
                if _recv(self._sock, _START_TIMEOUT_S) is None:
                    self._stop()
            except (OSError, TimeoutError):
                self._stop()

    def usage(self) -> dict[str, int]:
        """Bytes and files in use in the session's writable space."""
        with self._lock:
            self._ensure()
            assert self._sock is not None
            _send(self._sock, {"op": "usage"})
            msg = _recv(self._sock, _START_TIMEOUT_S) or {}
            return {"bytes": int(msg.get("bytes", 0)), "files": int(msg.get("files", 0))}

    def _call(
        self,
        spec: dict[str, Any],
        code: bytes,
        stdin: bytes,
        limits: Limits,
        cases: list[list[Any]] | None,
    ) -> RunResult | FunctionResult:
        with self._lock:
            self._ensure()
            try:
                return self._call_locked(spec, code, stdin, limits, cases)
            except SandboxError:
                self._stop()
                raise

    def _call_locked(
        self,
        spec: dict[str, Any],
        code: bytes,
        stdin: bytes,
        limits: Limits,
        cases: list[list[Any]] | None,
    ) -> RunResult | FunctionResult:
        assert self._sock is not None
        mine: list[int] = []
        theirs: list[int] = []
        try:
            theirs.append(_memfd("code", code))
            r, w = os.pipe()  # stdin
            mine.append(w)
            theirs.append(r)
            for _ in range(2):  # stdout, stderr
                r, w = os.pipe()
                mine.append(r)
                theirs.append(w)
            if cases is not None:
                cr, cw = os.pipe()
                rr, rw = os.pipe()
                mine += [cw, rr]
                theirs += [cr, rw]
            req = {
                "op": "call",
                **spec,
                "limits": limits.supervisor(),
                "cwd": _layout.WORKSPACE,
                "env": self.env,
                "read_paths": self._view.read_paths,
                "write_paths": [_layout.WORKSPACE, "/tmp", "/dev/shm", "/dev/null"],
                "watch_memory": bool(self.info.get("proc")),
                "require": [r for r in self._call_required() if r not in self.allow_missing],
            }
            _send(self._sock, req, theirs)
        finally:
            for fd in theirs:
                with contextlib.suppress(OSError):
                    os.close(fd)
        result = _Exchange(self._sock, mine, stdin, limits, cases, list(self.isolation)).run()
        if not self._call_layers:
            self._call_layers = [x for x in result.isolation if x not in self.isolation]
            self.isolation = result.isolation
        return result


class _SpawnFailed(Exception):
    pass


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``proc.wait(timeout)`` woken by the exit itself (Popen polls with sleeps up to 50 ms)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # already reaped, or no pidfd
        proc.wait(timeout)
        return
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    proc.wait()


def _as_user(uid: int, python: str) -> list[str]:
    """A command prefix that drops to ``uid`` (its own group, no other groups), then execs the rest."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    drop = f"import os, sys; os.setgroups([]); os.setgid({uid}); os.setuid({uid}); os.execv(sys.argv[1], sys.argv[1:])"
    return [python, "-I", "-S", "-c", drop]


class _Exchange:
    """One call seen from the server: feed stdin, read stdout/stderr up to the cap, run the
    lock-step cases, until the supervisor says the call is done."""

    def __init__(
        self,
        sock: socket.socket,
        fds: list[int],
        stdin: bytes,
        limits: Limits,
        cases: list[list[Any]] | None,
        isolation: list[str],
    ) -> None:
        self.sock = sock
        self.stdin_w, self.out_r, self.err_r = fds[:3]
        self.cases_w, self.results_r = (fds[3], fds[4]) if cases is not None else (-1, -1)
        self.limits = limits
        self.cases = cases
        self.isolation = isolation
        self.pending_stdin = memoryview(stdin)
        self.buf = {self.out_r: bytearray(), self.err_r: bytearray()}
        self.truncated: set[int] = set()
        self.results = bytearray()
        self.loaded: bool | None = None
        self.load_error: str | None = None
        self.answers: list[CaseResult] = []
        self.outgoing = b""
        self.nonce = ""
        self.open = {fd for fd in fds if fd >= 0}
        for fd in self.open:
            os.set_blocking(fd, False)

    def _close(self, fd: int) -> None:
        if fd in self.open:
            self.open.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def run(self) -> RunResult | FunctionResult:
        if not self.pending_stdin:
            self._close(self.stdin_w)
        deadline = time.monotonic() + self.limits.wall_s + _GRACE_S
        done: dict[str, Any] | None = None
        try:
            while done is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxError(f"the sandbox did not end a call within {self.limits.wall_s + _GRACE_S:.0f} s")
                pipes = (self.out_r, self.err_r, self.results_r)
                readers = [self.sock.fileno(), *(fd for fd in pipes if fd in self.open)]
                writers = [fd for fd in (self.stdin_w, self.cases_w) if fd in self.open and self._wants_write(fd)]
                r, w, _ = select.select(readers, writers, [], min(left, 1.0))
                for fd in w:
                    self._write(fd)
                for fd in r:
                    if fd == self.sock.fileno():
                        done = _recv(self.sock, 0)
                        if done is None:
                            raise SandboxError("the sandbox's supervisor died")
                    else:
                        self._read(fd)
            # Everything of the call is dead: drain what is left in the pipes, bounded (a
            # process the kill missed could hold a pipe open; never spin on it).
            self._drain(time.monotonic() + _DRAIN_S)
        finally:
            for fd in list(self.open):
                self._close(fd)
        if done.get("op") != "done":
            raise SandboxError(f"the sandbox could not run the call: {done.get('error')}")
        common: dict[str, Any] = {
            "stdout": _text(self.buf[self.out_r], self.out_r in self.truncated),
            "stderr": _text(self.buf[self.err_r], self.err_r in self.truncated),
            "exit_code": int(done.get("exit_code") or 0),
            "time_s": float(done.get("time_s") or 0.0),
            "timed_out": bool(done.get("timed_out")),
            "killed": done.get("killed"),
            "peak_memory_bytes": done.get("memory_peak"),
            "limit": limit_met(done, _text(self.buf[self.err_r], False)),
            "isolation": self.isolation + [x for x in done.get("layers") or [] if x not in self.isolation],
        }
        if self.cases is None:
            return RunResult(**common)
        answers = self.answers + [CaseResult()] * (len(self.cases) - len(self.answers))
        return FunctionResult(**common, load_error=self.load_error, cases=answers)

    def _drain(self, deadline: float) -> None:
        """Read the output pipes to their end, or until ``deadline``; then close them."""
        pipes = [fd for fd in (self.out_r, self.err_r, self.results_r) if fd in self.open]
        while pipes:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(pipes, [], [], left)
            for fd in ready:
                self._read(fd)
            pipes = [fd for fd in pipes if fd in self.open]
        for fd in pipes:
            self._close(fd)

    # -- writing

    def _wants_write(self, fd: int) -> bool:
        if fd == self.stdin_w:
            return bool(self.pending_stdin)
        return bool(self.outgoing)

    def _write(self, fd: int) -> None:
        try:
            if fd == self.stdin_w:
                n = os.write(fd, self.pending_stdin[: 1 << 16])
                self.pending_stdin = self.pending_stdin[n:]
                if not self.pending_stdin:
                    self._close(fd)
            else:
                n = os.write(fd, self.outgoing[: 1 << 16])
                self.outgoing = self.outgoing[n:]
        except BlockingIOError:
            return
        except OSError:  # the reader is gone
            self._close(fd)

    def _next_case(self) -> None:
        """Send the next case, or close the cases pipe after the last."""
        assert self.cases is not None
        i = len(self.answers)
        if i >= len(self.cases):
            self._close(self.cases_w)
            return
        self.nonce = secrets.token_hex(8)
        self.outgoing = (json.dumps({"n": self.nonce, "args": self.cases[i]}) + "\n").encode()

    # -- reading

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(fd)
            return
        if fd == self.results_r:
            self._results(data)
            return
        buf = self.buf[fd]
        room = self.limits.output_bytes - len(buf)
        buf += data[: max(room, 0)]
        if len(data) > room:
            self.truncated.add(fd)
            self._close(fd)  # the writer gets EPIPE: no more output is read, or paid for

    def _results(self, data: bytes) -> None:
        self.results += data
        while True:
            nl = self.results.find(b"\n")
            if nl < 0:
                if len(self.results) > _MAX_ANSWER:
                    self._give_up()
                return
            line = bytes(self.results[:nl])
            del self.results[: nl + 1]
            self._line(line)
            if self.results_r not in self.open:
                return

    def _give_up(self) -> None:
        """The code broke the protocol: no more of its answers count."""
        self._close(self.results_r)
        self._close(self.cases_w)
        self.outgoing = b""

    def _line(self, line: bytes) -> None:
        assert self.cases is not None
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            self._give_up()
            return
        if self.loaded is None:
            if msg.get("loaded") is True and len(msg) == 1:
                self.loaded = True
                self._next_case()
            else:
                self.loaded = False
                err = msg.get("load_error")
                self.load_error = str(err)[:2000] if isinstance(err, str) else "the code broke the call's protocol"
                self._give_up()
            return
        if msg.get("n") != self.nonce or self.outgoing or len(self.answers) >= len(self.cases):
            self._give_up()  # an answer to no question (or ahead of its question's delivery)
            return
        error = msg.get("error")
        if "value" in msg and error is None:
            self.answers.append(CaseResult(value=msg["value"], answered=True))
        else:
            self.answers.append(CaseResult(error=str(error)[:500], answered=True))
        self._next_case()


def _explain(err: str) -> str:
    """A bubblewrap failure, with what to do about it."""
    low = err.lower()
    if "no permissions to create new namespace" in low or ("operation not permitted" in low and "namespace" in low):
        return (
            f"the sandbox cannot create user namespaces here ({err.strip()}). In a container, run it with the "
            "sandbox's security options (openenv.deploy.start_container does; by hand: docker run --security-opt "
            "seccomp=<the file `openenv sandbox seccomp-profile` prints> --security-opt systempaths=unconfined); "
            "on a host, "
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 or "
            "user.max_user_namespaces > 0; on Ubuntu, AppArmor's restriction must allow bwrap)."
        )
    return f"the sandbox did not start: {err.strip()}"


def _advice(missing: Sequence[str]) -> str:
    if "landlock" in missing:
        return "Landlock needs Linux 5.13+ with Landlock enabled (the lsm= boot parameter)."
    if "memory" in missing:
        return (
            "The memory watchdog needs /proc inside the sandbox: in a container, add --security-opt "
            "systempaths=unconfined (openenv.deploy.start_container does)."
        )
    return ""
