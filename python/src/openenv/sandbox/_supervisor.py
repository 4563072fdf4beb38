"""The sandbox's supervisor: the first process inside the sandbox (PID 1 of its PID namespace),
which runs each call in a confined child and makes sure nothing of the call outlives it.

Standard library only: this file is copied into the sandbox (``/.openenv/supervisor.py``, read
only) and runs under the sandbox's interpreter as ``python -I -S -B supervisor.py FD``, where FD
is a ``SOCK_SEQPACKET`` socket to the server (:mod:`openenv.sandbox._box`). Every message is
one JSON object; file descriptors travel beside it (``SCM_RIGHTS``). The server speaks first:

* ``setup``: mount the session's private, size-capped tmpfs (``/box``, with ``size`` and
  ``nr_inodes``) and bind its ``work``, ``tmp`` and ``shm`` directories onto the workspace,
  ``/tmp`` and ``/dev/shm``; forbid nested user namespaces in the sandbox's own (its
  ``user.max_user_namespaces``); drop every capability; check that none of the ``secrets``
  paths is visible; answer ``ready`` with the layers in force and what was visible.
* ``call`` (fds: code, stdin, stdout, stderr, and for ``function`` calls the cases and
  results pipes): fork the call's process, confine it (:mod:`_confine`) and run the code; watch
  its wall time and the resident memory of all its processes together; when the call's process
  ends, or a limit is reached, kill every process of the call (``kill(-1)`` from PID 1 reaches
  the whole namespace), remove the SysV IPC objects of its namespace (seccomp refuses creating
  them; this holds where that layer is allowed to be missing), empty ``/tmp`` and ``/dev/shm``;
  answer ``done``.
* ``wipe``: empty the workspace (a new episode); ``usage``: the box's bytes and files in use.

Hidden test inputs never pass through here: they go from the server to the call's process on
the cases pipe, one at a time, each after the previous answer (``function`` calls).
"""

from __future__ import annotations

import array
import ctypes
import fcntl as _fcntl
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
import types
from typing import Any, NoReturn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _confine  # type: ignore[import-not-found]  # next to this file in the sandbox

libc = _confine.libc
TICK_S = 0.01
MAX_MSG = 1 << 20


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode())


def recv(sock: socket.socket) -> tuple[Any, list[int]]:
    fds = array.array("i")
    data, anc, _flags, _addr = sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(16 * fds.itemsize))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        return None, []
    return json.loads(data), list(fds)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                  data.encode() if data else None) != 0:  # fmt: skip
        raise OSError(_confine._err(f"mount {target}"))


MS_BIND, MS_NOSUID, MS_NODEV = 4096, 2, 4


def setup(req: dict[str, Any]) -> dict[str, Any]:
    """The private box, the capability drop and the secrets check; the ``ready`` answer."""
    layers = []
    box = req.get("box")
    if box:
        os.makedirs("/box", exist_ok=True)
        opts = f"size={int(box['size'])},nr_inodes={int(box['inodes'])},mode=0755"
        _mount("tmpfs", "/box", "tmpfs", MS_NOSUID | MS_NODEV, opts)
        for sub, target in (("work", req["workspace"]), ("tmp", "/tmp"), ("shm", "/dev/shm")):
            os.makedirs(f"/box/{sub}", mode=0o777 if sub != "work" else 0o755, exist_ok=True)
            if sub != "work":
                os.chmod(f"/box/{sub}", 0o1777)
            os.makedirs(target, exist_ok=True)
            _mount(f"/box/{sub}", target, None, MS_BIND, None)
        layers.append("disk-quota")
    if req.get("namespaces") and os.path.isdir("/proc/sys"):
        # No nested user namespace at all (user.* sysctls are per user namespace, writable with
        # CAP_SYS_RESOURCE in it); seccomp denies creating one as well.
        if _sysctl("user/max_user_namespaces", "0"):
            layers.append("no-user-namespaces+kernel")
    if req.get("namespaces"):
        _confine.drop_capabilities()
    if _confine.not_dumpable():
        layers.append("supervisor-not-dumpable")
    visible = []
    for path in req.get("secrets", []):
        try:
            os.lstat(path)
            visible.append(path)
        except OSError:
            pass
    proc = os.path.isdir("/proc/self")
    return {
        "op": "ready",
        "layers": layers,
        "visible": visible,
        "proc": proc,
        "python": ".".join(map(str, sys.version_info[:3])),
        "pid": os.getpid(),
    }


def _sysctl(name: str, value: str) -> bool:
    try:
        with open(f"/proc/sys/{name}", "w") as f:
            f.write(value)
        return True
    except OSError:
        return False


def _plain(value: Any) -> Any:
    """JSON-able form of a returned value (tuples as lists, sets sorted); repr otherwise."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"__repr__": repr(value)[:1000]}


def _read_code(fd: int) -> str:
    with os.fdopen(fd, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def _exit_code(exc: SystemExit) -> int:
    """The status of an uncaught SystemExit, as the interpreter computes it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def _finish(rc: int) -> NoReturn:
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(rc)


def child(req: dict[str, Any], fds: list[int], namespaces: bool, layers_w: int) -> None:
    """The call's process: set up its streams, confine itself, run the code. Never returns."""
    try:
        source = _read_code(fds[0])
        # stdin, stdout, stderr (and the cases and results pipes) onto 0-2 (3, 4): moved out of
        # the way first, since a received fd may already sit on a target number.
        high = [_fcntl.fcntl(fd, _fcntl.F_DUPFD, 64) for fd in (*fds[1:], layers_w)]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        layers_w = len(high) - 1
        os.closerange(len(high), 1 << 16)  # the control socket and every other fd
        for s in range(1, signal.NSIG):
            if s in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                signal.signal(s, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        # As the interpreter starts a program: SIGPIPE and SIGXFSZ ignored (errors instead).
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if not namespaces:
            os.setsid()  # a process group of its own, which the supervisor kills whole
        os.chdir(req["cwd"])
        layers = _confine.confine(req, namespaces, os.getpid())
        os.write(layers_w, json.dumps(layers).encode())
        os.close(layers_w)
        missing = [r for r in req.get("require", []) if not any(x.startswith(r) for x in layers)]
        if missing:
            os.write(2, f"sandbox: refusing to run code: missing {missing}\n".encode())
            os._exit(125)
    except BaseException:  # noqa: BLE001 - setup failed: nothing of the code has run
        try:
            os.write(2, ("sandbox: " + traceback.format_exc()[-2000:]).encode())
        finally:
            os._exit(125)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    if req["mode"] == "exec":
        argv = req["argv"]
        env = req.get("env") or {}
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            os.write(2, f"sandbox: cannot run {argv[0]!r}: {e}\n".encode())
            os._exit(127)
    # The interpreter as a fresh program would have it: no supervisor in sys.path or sys.modules.
    # An environment's own program (isolated: a grader, a file copier) gets no working directory
    # on its path either, so that a module the agent left in the workspace (tarfile.py,
    # subprocess.py) is never imported in place of the standard library's (RFC 0015).
    cwd_path = [] if req.get("isolated") else [req["cwd"]]
    sys.path[:] = cwd_path + [p for p in sys.path[1:] if not p.startswith("/.openenv")]
    for name in ("_confine", "__main__"):
        sys.modules.pop(name, None)
    os.environ.clear()
    os.environ.update(req.get("env") or {})
    if req["mode"] == "run":
        sys.argv = ["main.py"]
        main = types.ModuleType("__main__")
        main.__dict__["__file__"] = os.path.join(req["cwd"], "main.py")
        sys.modules["__main__"] = main
        rc = 0
        try:
            exec(compile(source, "main.py", "exec", dont_inherit=True), main.__dict__)
        except SystemExit as e:
            rc = _exit_code(e)
        except BaseException:  # noqa: BLE001 - reported like an uncaught exception
            traceback.print_exc()
            rc = 1
        _finish(rc)
    _function(source, req["entry_point"])


def _function(source: str, entry_point: str) -> NoReturn:
    """``function`` calls: load the code, then answer one case at a time from fd 3 on fd 4."""
    results = os.fdopen(4, "w", buffering=1)
    cases = os.fdopen(3, "r")
    mod = types.ModuleType("solution")
    sys.modules["solution"] = mod
    try:
        exec(compile(source, "solution.py", "exec", dont_inherit=True), mod.__dict__)
        fn = mod.__dict__.get(entry_point)
        if not callable(fn):
            raise NameError(f"no function named {entry_point!r}")
    except BaseException as e:  # noqa: BLE001 - reported as the load error
        results.write(json.dumps({"load_error": f"{type(e).__name__}: {e}"[:2000]}) + "\n")
        _finish(1)
    results.write('{"loaded": true}\n')
    for line in cases:
        try:
            req = json.loads(line)
            nonce, args = req["n"], req["args"]
        except (ValueError, KeyError, TypeError):
            break
        try:
            answer = {"n": nonce, "value": _plain(fn(*args))}
        except BaseException as e:  # noqa: BLE001 - reported per case
            answer = {"n": nonce, "error": f"{type(e).__name__}: {e}"[:500]}
        del args, req
        try:
            text = json.dumps(answer)
        except (TypeError, ValueError, RecursionError):
            text = json.dumps({"n": nonce, "error": "unserialisable result"})
        results.write(text + "\n")
    _finish(0)


def _rss_pages(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return _rss_pages(pid) * PAGE


PAGE = os.sysconf("SC_PAGE_SIZE")


class Memory:
    """The resident memory of the call's processes together, sampled every tick: the sum of
    their resident sets (shared pages once per process: an upper bound), and when that is over
    the limit, their proportional sets (shared pages split between their users) to confirm."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.peak = 0

    def over(self, pids: list[int]) -> bool:
        rss = sum(_rss_pages(p) for p in pids) * PAGE
        self.peak = max(self.peak, rss)
        if rss <= self.limit:
            return False
        pss = sum(_pss_bytes(p) for p in pids)
        return pss > self.limit


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1]


def _kill_all(main_pid: int, namespaces: bool) -> None:
    """Kill every process of the call and reap them."""
    if namespaces:
        try:
            os.kill(-1, signal.SIGKILL)  # from PID 1: every other process of the namespace
        except ProcessLookupError:
            pass
    else:
        try:
            os.killpg(main_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if not namespaces:
                return  # orphans of a group are reaped by the subreaper below, as they come
            time.sleep(0.001)


def _remove_ipc() -> None:
    """Remove every SysV IPC object of the sandbox's IPC namespace. Seccomp refuses creating
    them; this holds where that layer was allowed to be missing."""
    buf = ctypes.create_string_buffer(512)
    for info_cmd, stat_cmd, kind in ((14, 13, "shm"), (19, 18, "sem"), (12, 11, "msg")):  # *_INFO, *_STAT
        ctl = {"shm": libc.shmctl, "sem": libc.semctl, "msg": libc.msgctl}[kind]

        def call(ident: int, cmd: int, arg: Any, ctl: Any = ctl, kind: str = kind) -> int:
            return int(ctl(ident, 0, cmd, arg) if kind == "sem" else ctl(ident, cmd, arg))

        top = call(0, info_cmd, buf)
        for idx in range(max(top, -1) + 1):
            ident = call(idx, stat_cmd, buf)
            if ident >= 0:
                call(ident, 0, None)  # IPC_RMID


def _empty(path: str, mode: int = 0o1777) -> None:
    """Remove everything below ``path`` (not following symlinks), keeping ``path`` (with ``mode``).

    A call's code owns what it made, so it may have taken the write or search permission off a
    directory (``path`` itself included) to keep files past the call: every directory is made
    the supervisor's to empty again first (same uid), breadth first, without recursion."""
    try:
        os.chmod(path, mode)
    except OSError:
        pass
    todo, dirs = [path], []
    while todo:
        d = todo.pop()
        dirs.append(d)
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for name in entries:
            p = os.path.join(d, name)
            try:
                if os.path.isdir(p) and not os.path.islink(p):
                    os.chmod(p, 0o700)
                    todo.append(p)
                else:
                    os.unlink(p)
            except OSError:
                pass
    for d in reversed(dirs[1:]):
        try:
            os.rmdir(d)
        except OSError:
            pass


def run_call(req: dict[str, Any], fds: list[int], namespaces: bool) -> dict[str, Any]:
    """One call: fork, watch, kill everything, clean up; the ``done`` answer."""
    lim = req["limits"]
    start = time.monotonic()
    layers_r, layers_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(layers_r)
        child(req, fds, namespaces, layers_w)
    os.close(layers_w)
    for fd in fds:
        os.close(fd)
    os.set_blocking(layers_r, False)
    layers = bytearray()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    deadline = start + float(lim["wall_s"])
    memory = Memory(int(lim["memory_bytes"])) if req.get("watch_memory") else None
    status = None
    timed_out = killed_for_memory = False
    while status is None:
        if layers_r >= 0:
            layers_r = _read_layers(layers_r, layers)
        try:
            while True:
                got, st = os.waitpid(-1, os.WNOHANG)
                if got == 0:
                    break
                if got == pid:
                    status = st
                    break
        except ChildProcessError:
            break
        if status is not None:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        if memory is not None and memory.over(_pids()):
            killed_for_memory = True
            break
        if pidfd >= 0:  # wakes up as soon as the call's process ends
            select.select([pidfd], [], [], TICK_S)
        else:
            time.sleep(TICK_S)
    elapsed = time.monotonic() - start
    if pidfd >= 0:
        os.close(pidfd)
    _kill_all(pid, namespaces)
    if layers_r >= 0:  # every writer is dead now: this ends
        os.set_blocking(layers_r, True)
        _read_layers(layers_r, layers, until_eof=True)
    if status is None:  # killed above: its status is the kill
        status = signal.SIGKILL
    if namespaces:
        _remove_ipc()
        _empty("/tmp")
        _empty("/dev/shm")
    exit_code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    return {
        "op": "done",
        "exit_code": exit_code,
        "timed_out": timed_out,
        "killed": "memory" if killed_for_memory else None,
        "time_s": elapsed,
        "memory_peak": memory.peak if memory else None,
        "layers": _layers(layers),
    }


def _read_layers(fd: int, buf: bytearray, until_eof: bool = False) -> int:
    """Read what the call's process reported of its confinement; -1 once the pipe is closed."""
    while True:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return fd
        if not data:
            os.close(fd)
            return -1
        buf += data
        if not until_eof:
            return fd


def _layers(buf: bytearray) -> list[str]:
    try:
        layers = json.loads(bytes(buf))
        return layers if isinstance(layers, list) else []
    except ValueError:
        return []


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    namespaces = os.getpid() == 1
    # PID 1 gets only the signals it handles: handle none (the interpreter handles SIGINT).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if not namespaces:
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of a call come back here
    req, _ = recv(sock)
    if req is None:
        return 0
    try:
        send(sock, setup(req))
    except OSError as e:
        send(sock, {"op": "error", "error": str(e)})
        return 70
    workspace = req["workspace"]
    while True:
        req, fds = recv(sock)
        if req is None:
            return 0
        op = req.get("op")
        try:
            if op == "call":
                send(sock, run_call(req, fds, namespaces))
            elif op == "wipe":
                _empty(workspace, 0o755)
                send(sock, {"op": "wiped"})
            elif op == "usage":
                st = os.statvfs(workspace)
                send(sock, {"op": "usage", "bytes": (st.f_blocks - st.f_bfree) * st.f_frsize,
                            "files": st.f_files - st.f_ffree})  # fmt: skip
            else:
                send(sock, {"op": "error", "error": f"unknown op {op!r}"})
        except OSError as e:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            send(sock, {"op": "error", "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    sys.exit(main())
