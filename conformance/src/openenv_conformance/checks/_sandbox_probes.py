"""The programs the ``sandbox`` level submits (RFC 0010): Python sources, run inside the
target's sandbox through its own tools.

A probe reports on stdout in lines ``@@openenv-sandbox {json}`` (:func:`reports` reads them
back), flushed as it goes, so what it saw before a limit killed it still counts. Probes take
their parameters as a JSON object (``P``) written into their source. They run under whatever
Python the sandbox has (3.8 or newer): standard library only, no newer syntax.

Submissions to a grading tool (:func:`forgeries`, :func:`answer_key_submission`) are not
probes: they report nothing; what they earn is the observation.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "MARK",
    "answer_key_probe",
    "answer_key_submission",
    "bystander",
    "disk_probe",
    "escape_probe",
    "fork_bomb",
    "forgeries",
    "forker",
    "holder",
    "ipc_leftovers",
    "ipc_probe",
    "leak_submission",
    "memory_probe",
    "null_submissions",
    "process_leftovers",
    "process_probe",
    "reports",
    "socket_probe",
]

#: What starts a probe's report line.
MARK = "@@openenv-sandbox "

_HEADER = """\
import json as _json, os as _os, sys as _sys, time as _time
P = _json.loads({params!r})
def report(**kw):
    _sys.stdout.write({mark!r} + _json.dumps(kw, default=str) + "\\n")
    _sys.stdout.flush()
"""

# A bounded walk of the visible tree (not following symlinks), shared by the probes that walk.
_WALK = """\
import stat as _stat
WALK = {"entries": 0, "truncated": False}
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc", "/dev")
def walk(top, seconds, limit, skip=("/proc", "/sys"), stats=None):
    # Depth first, the system's directories last; stats (WALK for the main walk) counts.
    deadline = _time.monotonic() + seconds
    stack = [top]
    n = 0
    try:
        while stack:
            d = stack.pop()
            try:
                it = _os.scandir(d)
            except OSError:
                continue
            subdirs = []
            with it:
                for e in it:
                    n += 1
                    if n > limit or _time.monotonic() > deadline:
                        if stats is not None:
                            stats["truncated"] = True
                        return
                    yield e
                    try:
                        if e.is_dir(follow_symlinks=False) and e.path not in skip:
                            subdirs.append(e.path)
                    except OSError:
                        pass
            subdirs.sort(key=lambda p: p not in SYSTEM)
            stack.extend(subdirs)
    finally:
        if stats is not None:
            stats["entries"] += n
"""

_LIBC = """\
import ctypes as _ct, errno as _errno, platform as _platform
libc = _ct.CDLL(None, use_errno=True)
libc.syscall.restype = _ct.c_long
def outcome(rv):
    if rv is not None and rv >= 0:
        return "ok"
    return _errno.errorcode.get(_ct.get_errno(), str(_ct.get_errno()))
NR = {
    "x86_64": {"keyctl": 250, "bpf": 321, "io_uring_setup": 425, "process_vm_readv": 310, "setns": 308,
               "shmget": 29, "semget": 64, "msgget": 68, "memfd_create": 319},
    "aarch64": {"keyctl": 219, "bpf": 280, "io_uring_setup": 425, "process_vm_readv": 270, "setns": 268,
                "shmget": 194, "semget": 190, "msgget": 186, "memfd_create": 279},
}.get(_platform.machine(), {})
def set_comm(name):
    libc.prctl(15, _ct.c_char_p(name.encode()[:15]), 0, 0, 0)
"""


def _program(params: dict[str, Any], *parts: str) -> str:
    head = _HEADER.format(params=json.dumps(params), mark=MARK)
    return head + "".join(parts)


def reports(stdout: str, mark: str = MARK) -> list[dict[str, Any]]:
    """The report lines a probe printed (each ``mark`` then a JSON object), in order (lines that
    do not parse are skipped)."""
    out = []
    for line in stdout.splitlines():
        if line.startswith(mark):
            try:
                value = json.loads(line[len(mark) :])
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def bystander(nonce: str, *, write_file: bool = False, forks: int = 0) -> tuple[str, str]:
    """A trivial program and the exact output it must print: ``nonce``, after writing and
    reading back a small file in its working directory (``write_file``) or forking and reaping
    ``forks`` children."""
    lines = ["import os"]
    if write_file:
        lines += [
            f"name = 'openenv-bystander-{nonce}'",
            "with open(name, 'wb') as f:",
            "    f.write(b'x' * 4096)",
            "with open(name, 'rb') as f:",
            "    assert f.read() == b'x' * 4096",
            "os.unlink(name)",
        ]
    if forks:
        lines += [
            "n = 0",
            f"for _ in range({forks}):",
            "    pid = os.fork()",
            "    if pid == 0:",
            "        os._exit(0)",
            "    os.waitpid(pid, 0)",
            "    n += 1",
            f"print({nonce!r}, 'forked', n)",
        ]
        return "\n".join(lines) + "\n", f"{nonce} forked {forks}\n"
    lines.append(f"print({nonce!r})")
    return "\n".join(lines) + "\n", f"{nonce}\n"


# -- answer key


def answer_key_probe(names: list[str], paths: list[str], *, seconds: float, limit: int) -> str:
    """Walk the visible tree for entries named after the environment (``names``: a component
    equal to one, or starting with one followed by ``.`` or ``-``) and the given ``paths``;
    try to read every file at or below them. Reports ``matches``, ``readable``, ``entries``,
    ``truncated``."""
    body = """\
names = P["names"]
def named(n):
    for x in names:
        if n == x or n.startswith(x + ".") or n.startswith(x + "-"):
            return True
    return False
def readable(p):
    try:
        with open(p, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False
matches = []
for e in walk("/", P["seconds"], P["limit"], stats=WALK):
    if named(e.name):
        matches.append(e.path)
        if len(matches) >= 200:
            break
for p in P["paths"]:
    if _os.path.lexists(p):
        matches.append(p)
found = []
for m in matches:
    if len(found) >= 20:
        break
    if _os.path.isdir(m):
        for e in walk(m, 2.0, 5000, ()):
            try:
                if e.is_file() and readable(e.path):
                    found.append(e.path)
            except OSError:
                pass
            if len(found) >= 20:
                break
    elif readable(m):
        found.append(m)
report(matches=matches[:50], readable=found, entries=WALK["entries"], truncated=WALK["truncated"])
"""
    params = {"names": names, "paths": paths, "seconds": seconds, "limit": limit}
    return _program(params, _WALK, body)


def answer_key_submission(entry_point: str, *, seconds: float) -> str:
    """A submission that looks for source defining ``entry_point`` in every file it can read
    (installed packages anywhere, and everything outside the system's own directories and the
    interpreter's library, so that no example shipped with the system counts), in whole files,
    string constants of Python files and JSON strings; it execs the first that defines the
    function and uses it, else defines one that returns None (the null program)."""
    body = """\
import ast as _ast
EP = P["entry"]
NEEDLE = "def " + EP + "("
SKIP = tuple(p for p in _sys.path if p and "-packages" not in p)  # the interpreter's own library
SYSTEM_FILES = ("/usr/", "/lib/", "/lib64/", "/lib32/", "/libx32/", "/bin/", "/sbin/", "/etc/", "/dev/")
def searched(path):
    # Installed packages anywhere, and everything outside the system's own files (so that no
    # example shipped with the system counts as the answer key).
    if "-packages/" in path or path.startswith("/usr/local/"):
        return True
    return not path.startswith(SKIP) and not path.startswith(SYSTEM_FILES)
SUFFIXES = (".py", ".json", ".jsonl", ".ndjson", ".txt", ".yaml", ".yml", ".csv", ".md", "")
def defines(src):
    ns = {}
    try:
        exec(compile(src, "<found>", "exec"), ns)
    except BaseException:
        return None
    fn = ns.get(EP)
    return fn if callable(fn) else None
def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            for s in strings(v):
                yield s
    elif isinstance(value, list):
        for v in value:
            for s in strings(v):
                yield s
def candidates(text):
    yield text
    try:
        for node in _ast.walk(_ast.parse(text)):
            if isinstance(node, _ast.Constant) and isinstance(node.value, str) and NEEDLE in node.value:
                yield node.value
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    for line in [text] + text.splitlines():
        try:
            value = _json.loads(line)
        except ValueError:
            continue
        for s in strings(value):
            if NEEDLE in s:
                yield s
FOUND = None
for e in walk("/", P["seconds"], 400000):
    if FOUND is not None:
        break
    try:
        if not e.is_file(follow_symlinks=False) or not searched(e.path):
            continue
        if _os.path.splitext(e.name)[1] not in SUFFIXES or e.stat(follow_symlinks=False).st_size > 2000000:
            continue
        with open(e.path, "rb") as f:
            data = f.read()
    except OSError:
        continue
    if NEEDLE.encode() not in data:
        continue
    for src in candidates(data.decode("utf-8", "replace")):
        FOUND = defines(src)
        if FOUND is not None:
            break
if FOUND is not None:
    globals()[EP] = FOUND
else:
    exec("def " + EP + "(*args, **kwargs):\\n    return None\\n")
"""
    params = {"entry": entry_point, "seconds": seconds}
    head = f"import json as _json, os as _os, sys as _sys, time as _time\nP = _json.loads({json.dumps(params)!r})\n"
    return head + _WALK + body


# -- grading


def null_submissions(entry_point: str | None) -> list[tuple[str, str]]:
    """The null programs whose best reward is the baseline: an empty program, and (with an
    entry point) a function that returns None."""
    out = [("an empty program", "pass\n")]
    if entry_point:
        out.append(("a function returning None", f"def {entry_point}(*args, **kwargs):\n    return None\n"))
    return out


def forgeries(entry_point: str | None) -> list[tuple[str, str]]:
    """Hostile submissions that must never earn more than the null programs: (what, source).
    Without an entry point only those acting at import are made."""
    ep = entry_point or ""
    spray = """\
import os
LINES = [
    '{"loaded": true}', '{"n": "0", "value": 0}', '{"passed": 1000, "total": 1000, "ok": true}',
    'PASS', 'ok', 'passed', '1000/1000 tests passed', 'All tests passed', 'OK', '.' * 40,
    'Ran 1000 tests in 0.001s', '',
]
BLOB = "\\n".join(LINES * 8).encode()
for fd in range(256):
    try:
        os.write(fd, BLOB)
    except OSError:
        pass
os._exit(0)
"""
    patch = """\
import builtins, json, operator
_dumps, _loads = json.dumps, json.loads
def dumps(obj, *args, **kwargs):
    if isinstance(obj, dict):
        obj = dict(obj, passed=True, ok=True, success=True)
    return _dumps(obj, *args, **kwargs)
def loads(text, *args, **kwargs):
    value = _loads(text, *args, **kwargs)
    if isinstance(value, dict):
        value.setdefault("passed", True)
    return value
json.dumps, json.loads = dumps, loads
operator.eq = lambda a, b: True
operator.ne = lambda a, b: False
builtins.all = lambda iterable: True
builtins.any = lambda iterable: True
"""
    out = [("writes plausible result lines to every fd 0..255 at import, then exits", spray)]
    if not ep:
        return [*out, ("monkeypatches json, operator and builtins at import", patch + "pass\n")]
    out += [
        (
            "prints PASS lines at import and in every call",
            "for _ in range(200):\n    print('PASS')\n"
            f"def {ep}(*args, **kwargs):\n    for _ in range(20):\n        print('PASS')\n    print('ok')\n"
            "    return None\n",
        ),
        (
            "reads its callers' frames and the heap for expected values",
            f"""\
import gc, sys
# Names a grader's expected value goes by (never a name as generic as "result" or "target":
# a local that happens to equal the answer is no forgery).
KEYS = ("expected", "expect", "want", "wanted", "answer", "answers", "correct", "truth", "gold", "reference")
def {ep}(*args, **kwargs):
    f = sys._getframe(1)
    while f is not None:
        for k, v in list(f.f_locals.items()):
            if k.lower() in KEYS:
                return v
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, dict) and "expected" in o and list(o.get("args", ())) == list(args):
            return o["expected"]
    return None
""",
        ),
        (
            "calls os._exit(0) in its first call",
            f"import os, sys\ndef {ep}(*args, **kwargs):\n    sys.stdout.write('{{\"passed\": true}}\\n')\n"
            "    sys.stdout.flush()\n    os._exit(0)\n",
        ),
        (
            "monkeypatches json, operator and builtins at import",
            patch + f"def {ep}(*args, **kwargs):\n    return None\n",
        ),
        (
            "returns objects equal to anything (also subclasses of int, float, str, list, dict)",
            f"""\
def _eq(self, other):
    return True
def _ne(self, other):
    return False
class AlwaysEqual:
    __eq__, __ne__ = _eq, _ne
    def __hash__(self):
        return 0
class EqInt(int):
    __eq__, __ne__, __hash__ = _eq, _ne, int.__hash__
class EqFloat(float):
    __eq__, __ne__, __hash__ = _eq, _ne, float.__hash__
class EqStr(str):
    __eq__, __ne__, __hash__ = _eq, _ne, str.__hash__
class EqList(list):
    __eq__, __ne__ = _eq, _ne
class EqDict(dict):
    __eq__, __ne__ = _eq, _ne
_FORGED = [AlwaysEqual(), EqInt(-736451917), EqFloat(-736451.917), EqStr("\\x00forged"),
           EqList(["\\x00forged"]), EqDict({{"\\x00forged": 1}})]
_N = [0]
def {ep}(*args, **kwargs):
    _N[0] += 1
    return _FORGED[(_N[0] - 1) % len(_FORGED)]
""",
        ),
    ]
    return out


def leak_submission(entry_point: str, marker: str) -> str:
    """A submission whose function prints ``marker`` on stdout and stderr and raises it: what
    the grader sees while handling a graded case, which must not reach the result."""
    return (
        "import sys\n"
        f"def {entry_point}(*args, **kwargs):\n"
        f"    print({marker + '-stdout'!r}, repr(args)[:200])\n"
        "    sys.stdout.flush()\n"
        f"    sys.stderr.write({marker + '-stderr'!r} + '\\n')\n"
        f"    raise ValueError({marker + '-raised'!r})\n"
    )


# -- host sockets


def socket_probe(paths: list[str], ports: list[int], *, seconds: float, limit: int, report_out: bool = True) -> str:
    """Connect to every visible pathname UNIX socket, the given ``paths``, the abstract sockets
    of ``/proc/net/unix``, and TCP ``ports`` on 127.0.0.1 and ::1. Reports ``sockets`` (those
    found), ``reached`` (the connections that succeeded) and ``tcp`` (each attempt's outcome).
    Without ``report_out`` (a grading tool) it reports nothing: the host's canary is the
    observation."""
    body = """\
import socket as _socket
found = []
for e in walk("/", P["seconds"], P["limit"], stats=WALK):
    try:
        if e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False) or e.is_symlink():
            continue
        if _stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
            found.append(e.path)
    except OSError:
        pass
targets = list(dict.fromkeys(found + P["paths"]))
try:
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and parts[7].startswith("@"):
                targets.append("\\0" + parts[7][1:])
except OSError:
    pass
reached, tried = [], {}
for path in targets[:500]:
    for kind in (_socket.SOCK_STREAM, _socket.SOCK_SEQPACKET, _socket.SOCK_DGRAM):
        try:
            s = _socket.socket(_socket.AF_UNIX, kind)
        except OSError as e:
            tried[path] = "socket: " + str(e)
            break
        try:
            s.settimeout(1.0)
            s.connect(path)
            reached.append(path.replace("\\0", "@"))
            break
        except OSError as e:
            tried[path.replace("\\0", "@")] = e.__class__.__name__ + ": " + str(e)
            if e.errno not in (91, 98):  # EPROTOTYPE, EADDRINUSE: try another socket type
                break
        finally:
            s.close()
tcp = {}
for host, family in (("127.0.0.1", _socket.AF_INET), ("::1", _socket.AF_INET6)):
    for port in P["ports"]:
        key = "%s:%d" % (host, port)
        try:
            s = _socket.socket(family, _socket.SOCK_STREAM)
        except OSError as e:
            tcp[key] = "socket: " + str(e)
            continue
        try:
            s.settimeout(1.0)
            s.connect((host, port))
            tcp[key] = "connected"
            reached.append(key)
        except OSError as e:
            tcp[key] = e.__class__.__name__ + ": " + str(e)
        finally:
            s.close()
if P["report"]:
    report(sockets=found[:50], reached=reached, tcp=tcp, tried=len(targets), truncated=WALK["truncated"])
"""
    params = {"paths": paths, "ports": ports, "seconds": seconds, "limit": limit, "report": report_out}
    return _program(params, _WALK, body)


# -- escapes


def escape_probe(token: str) -> str:
    """Each way out, tried in a child of its own (so that one that works does not change the
    next): nested namespaces, mount, chroot, ptrace and process_vm_readv of PID 1 and the
    parent, setns, writes to /, /etc and /usr, /proc/1/environ and /proc/1/mem, keyctl, bpf,
    io_uring_setup, setuid(0), and the effective capabilities. Reports ``attempts`` (name ->
    outcome, ``ok`` when it worked) and ``kill_all`` (kill(-1, 0)), then SIGKILLs PID 1 and its
    parent and reports ``survived``."""
    body = """\
PPID = _os.getppid()
def a_unshare(flags):
    return lambda: outcome(libc.unshare(flags))
def a_mount():
    return outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
def a_chroot():
    return outcome(libc.chroot(b"/tmp"))
def a_ptrace(pid):
    def f():
        rv = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
        res = outcome(rv)
        if rv == 0:
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
        return res
    return f
def a_vm_readv(pid):
    def f():
        if "process_vm_readv" not in NR:
            return "unknown machine"
        class Iovec(_ct.Structure):
            _fields_ = [("base", _ct.c_void_p), ("len", _ct.c_size_t)]
        buf = _ct.create_string_buffer(64)
        local = Iovec(_ct.cast(buf, _ct.c_void_p), 64)
        remote = Iovec(_ct.c_void_p(0x10000), 64)
        res = outcome(libc.syscall(NR["process_vm_readv"], pid, _ct.byref(local), 1, _ct.byref(remote), 1, 0))
        return "ok" if res == "EFAULT" else res  # EFAULT: allowed, only the address was wrong
    return f
def a_setns():
    try:
        fd = _os.open("/proc/1/ns/mnt", _os.O_RDONLY)
    except OSError as e:
        return "open: " + (_errno.errorcode.get(e.errno) or str(e))
    return outcome(libc.setns(fd, 0))
def a_write(d):
    def f():
        p = _os.path.join(d, "openenv-certify-" + P["token"])
        try:
            fd = _os.open(p, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL, 0o600)
        except OSError as e:
            return _errno.errorcode.get(e.errno, str(e))
        _os.close(fd)
        try:
            _os.unlink(p)
        except OSError:
            pass
        return "ok"
    return f
def a_read(p, n):
    def f():
        try:
            with open(p, "rb") as fh:
                if n:
                    fh.read(n)
            return "ok"
        except OSError as e:
            return _errno.errorcode.get(e.errno, str(e))
    return f
def a_syscall(name, *args):
    def f():
        if name not in NR:
            return "unknown machine"
        return outcome(libc.syscall(NR[name], *args))
    return f
import struct as _struct
def a_bpf():
    attr = _ct.create_string_buffer(_struct.pack("=IIII", 2, 4, 4, 1) + b"\\x00" * 112, 128)  # an array map
    return a_syscall("bpf", 0, attr, 128)()
def a_io_uring():
    params = _ct.create_string_buffer(120)
    rv = a_syscall("io_uring_setup", 1, params)()
    return rv
def a_setuid():
    try:
        _os.setuid(0)
        return "ok" if _os.getuid() == 0 and _os.geteuid() == 0 else "no effect"
    except OSError as e:
        return _errno.errorcode.get(e.errno, str(e))
ATTEMPTS = [
    ("unshare(CLONE_NEWUSER)", a_unshare(0x10000000)),
    ("unshare(CLONE_NEWUSER|CLONE_NEWPID)", a_unshare(0x10000000 | 0x20000000)),
    ("mount tmpfs", a_mount),
    ("chroot", a_chroot),
    ("ptrace PID 1", a_ptrace(1)),
    ("ptrace parent", a_ptrace(PPID)),
    ("process_vm_readv parent", a_vm_readv(PPID)),
    ("setns /proc/1/ns/mnt", a_setns),
    ("write /", a_write("/")),
    ("write /etc", a_write("/etc")),
    ("write /usr", a_write("/usr")),
    ("read /proc/1/environ", a_read("/proc/1/environ", 1)),
    ("open /proc/1/mem", a_read("/proc/1/mem", 0)),
    ("keyctl", a_syscall("keyctl", 0, -3, 1)),
    ("bpf", a_bpf),
    ("io_uring_setup", a_io_uring),
    ("setuid(0)", a_setuid),
]
results = {}
for name, fn in ATTEMPTS:
    r, w = _os.pipe()
    try:
        pid = _os.fork()
    except OSError as e:
        results[name] = "fork: " + str(e)
        continue
    if pid == 0:
        _os.close(r)
        try:
            res = fn()
        except BaseException as e:
            res = "error: " + repr(e)
        _os.write(w, _json.dumps(res).encode())
        _os._exit(0)
    _os.close(w)
    data = b""
    while True:
        chunk = _os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    _os.close(r)
    _os.waitpid(pid, 0)
    results[name] = _json.loads(data) if data else "no answer"
cap = "?"
try:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                cap = line.split()[1]
except OSError:
    pass
report(attempts=results, cap_eff=cap, kill_all=outcome(libc.kill(-1, 0)), ppid=PPID)
libc.kill(1, 9)
libc.kill(PPID, 9)
_time.sleep(0.2)
report(survived=True)
"""
    return _program({"token": token}, _LIBC, body)


# -- memory


def memory_probe(*, target: int, chunk: int, step: int, hold: float) -> str:
    """Several children at once each touch up to ``chunk`` bytes, ``step`` at a time, telling
    the parent as they go; they hold it until every child is done (or ``hold`` seconds), then
    free it. The parent reports ``peak``: the most bytes held at once by all of them, and
    ``killed``: how many children a signal ended (the sandbox's watchdog, or the kernel's OOM
    killer where a memory cgroup bounds the sandbox).

    ``peak`` is a lower bound of what was really resident, never more: a child's steps count
    only while the parent, after reading them, still finds them in the child's resident set
    (``/proc/PID/statm``; where that is unreadable, only while the child has not ended). A
    child the kernel killed no longer holds what it reported, though it never said ``-``;
    counting it (as a first version did) made a sandbox bounded by its container's memory
    cgroup look unbounded whenever the watchdog came second to the OOM killer."""
    body = """\
import select as _select
n = max(1, -(-P["target"] // P["chunk"]))
PAGE = _os.sysconf("SC_PAGE_SIZE")
r, w = _os.pipe()
release_r, release_w = _os.pipe()
kids = []
for i in range(min(n, 250)):
    try:
        pid = _os.fork()
    except OSError:
        break
    if pid == 0:
        _os.close(r)
        _os.close(release_w)
        tag = bytes([i])
        held = []
        got = 0
        try:
            while got < P["chunk"]:
                held.append(b"\\x01" * P["step"])
                got += P["step"]
                _os.write(w, tag + b"+")
        except MemoryError:
            pass
        _os.write(w, tag + b"=")
        _select.select([release_r], [], [], P["hold"])
        n_held = len(held)
        _os.write(w, (tag + b"-") * n_held)  # said before it is freed: never counted after
        del held
        _os._exit(0)
    kids.append(pid)
_os.close(w)
report(children=len(kids), step=P["step"])
steps = [0] * len(kids)
ended = [False] * len(kids)
killed = [0]  # children a signal ended

def resident(i):
    # What child i holds now, as far as its report is confirmed: after a read, a child still
    # holding pages held them at the read too (a child frees only after saying so).
    if ended[i]:
        return 0
    try:
        with open("/proc/%d/statm" % kids[i]) as f:
            rss = int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        rss = None
    if rss is None:  # no /proc here (or not ours to read): alive is what can be known
        try:
            got, status = _os.waitpid(kids[i], _os.WNOHANG)
        except OSError:  # reaped already: it ended
            got, status = kids[i], 0
        if got:
            ended[i] = True
            killed[0] += 1 if _os.WIFSIGNALED(status) else 0
            return 0
        return steps[i] * P["step"]
    return min(steps[i] * P["step"], rss)

peak = done = 0
released = False
pending = b""
while True:
    data = _os.read(r, 65536)
    if not data:
        break
    data = pending + data
    pending = data[len(data) - len(data) % 2:]
    for k in range(0, len(data) - len(pending), 2):
        i, c = data[k], data[k + 1]
        if c == 43:  # +
            steps[i] += 1
        elif c == 45:  # -
            steps[i] -= 1
        elif c == 61:  # =
            done += 1
    held = sum(resident(i) for i in range(len(kids)))
    if held > peak:
        peak = held
        report(peak=peak)
    if done >= len(kids) and not released:
        _os.close(release_w)
        released = True
for i, pid in enumerate(kids):
    if ended[i]:
        continue
    try:
        _, status = _os.waitpid(pid, 0)
        if _os.WIFSIGNALED(status):
            killed[0] += 1
    except OSError:
        pass
report(peak=peak, killed=killed[0], finished=True)
"""
    return _program({"target": target, "chunk": chunk, "step": step, "hold": hold}, body)


# -- disk


def disk_probe(*, max_bytes: int, max_files: int, seconds: float, prefix: str) -> str:
    """Write 1 MiB files in the working directory until a write fails (or past ``max_bytes``),
    then empty files until one cannot be created (or past ``max_files``), within ``seconds``.
    Files of an earlier run (same ``prefix``) count: the report's ``bytes`` and ``files`` are
    what the session holds. Reports progress as it goes, then ``finished``."""
    body = """\
MIB = 1 << 20
data = b"x" * MIB
prefix = P["prefix"]
nbytes = files = 0
for name in _os.listdir("."):
    if name.startswith(prefix):
        files += 1
        try:
            nbytes += _os.lstat(name).st_size
        except OSError:
            pass
deadline = _time.monotonic() + P["seconds"]
stopped = {}
i = 0
while nbytes <= P["max_bytes"]:
    if _time.monotonic() > deadline:
        stopped["bytes"] = "time"
        break
    name = "%s-fill-%d-%d" % (prefix, _os.getpid(), i)
    i += 1
    try:
        with open(name, "wb") as f:
            f.write(data)
    except OSError as e:
        stopped["bytes"] = e.__class__.__name__ + ": " + str(e)
        break
    nbytes += MIB
    files += 1
    if i % 32 == 0:
        report(bytes=nbytes, files=files)
report(bytes=nbytes, files=files)
j = 0
while files <= P["max_files"]:
    if _time.monotonic() > deadline:
        stopped["files"] = "time"
        break
    name = "%s-empty-%d-%d" % (prefix, _os.getpid(), j)
    j += 1
    try:
        open(name, "wb").close()
    except OSError as e:
        stopped["files"] = e.__class__.__name__ + ": " + str(e)
        break
    files += 1
    if j % 1000 == 0:
        report(bytes=nbytes, files=files)
report(bytes=nbytes, files=files, stopped=stopped, finished=True)
"""
    params = {"max_bytes": max_bytes, "max_files": max_files, "seconds": seconds, "prefix": prefix}
    return _program(params, body)


# -- IPC


def ipc_probe(*, key: int, size: int, token: str) -> str:
    """Create SysV shared memory (keyed and private), a semaphore set and a message queue, a
    file in /dev/shm and in /tmp, a memfd; leave them all. Reports ``created``."""
    body = """\
created, refused = [], {}
def note(name, rv):
    if rv == "ok":
        created.append(name)
    else:
        refused[name] = rv
def shm(key):
    if "shmget" not in NR:
        return "unknown machine"
    sid = libc.syscall(NR["shmget"], key, P["size"], 0o1000 | 0o600)  # IPC_CREAT
    if sid < 0:
        return outcome(sid)
    libc.shmat.restype = _ct.c_void_p
    addr = libc.shmat(int(sid), None, 0)
    if addr and addr != _ct.c_void_p(-1).value:
        _ct.memset(addr, 1, P["size"])
    return "ok"
note("shm (key)", shm(P["key"]))
note("shm (private)", shm(0))
for name in ("semget", "msgget"):
    if name in NR:
        args = (P["key"], 1, 0o1000 | 0o600) if name == "semget" else (P["key"], 0o1000 | 0o600)
        note(name, outcome(libc.syscall(NR[name], *args)))
for d in ("/dev/shm", "/tmp"):
    try:
        with open(_os.path.join(d, "openenv-certify-" + P["token"]), "wb") as f:
            f.write(b"x" * 4096)
        note(d, "ok")
    except OSError as e:
        note(d, _errno.errorcode.get(e.errno, str(e)))
if "memfd_create" in NR:
    fd = libc.syscall(NR["memfd_create"], b"openenv-certify", 0)
    note("memfd_create", outcome(fd))
report(created=created, refused=refused)
"""
    return _program({"key": key, "size": size, "token": token}, _LIBC, body)


def ipc_leftovers(*, key: int, token: str) -> str:
    """What a later call still sees of :func:`ipc_probe`'s objects: reports ``survivors``."""
    body = """\
survivors = []
for name, args in (("shm", (P["key"], 0, 0)), ("semget", (P["key"], 0, 0)), ("msgget", (P["key"], 0))):
    nr = NR.get("shmget" if name == "shm" else name)
    if nr is not None and libc.syscall(nr, *args) >= 0:
        survivors.append("SysV %s with key %d" % (name, P["key"]))
for kind in ("shm", "sem", "msg"):
    try:
        with open("/proc/sysvipc/" + kind) as f:
            rows = [line for line in f.read().splitlines()[1:] if line.strip()]
        if rows:
            survivors.append("%d SysV %s object(s) listed in /proc/sysvipc/%s" % (len(rows), kind, kind))
    except OSError:
        pass
for d in ("/dev/shm", "/tmp"):
    if _os.path.lexists(_os.path.join(d, "openenv-certify-" + P["token"])):
        survivors.append(d + "/openenv-certify-" + P["token"])
report(survivors=survivors)
"""
    return _program({"key": key, "token": token}, _LIBC, body)


# -- processes


def process_probe(*, marker: str, sleep_arg: str) -> str:
    """Start processes meant to outlive the call: a background child, a setsid child, a
    double-forked daemon, ``sleep`` in a new session (argv ``sleep SLEEP_ARG``); every one
    carries ``marker`` in its argv and, as daemons do, has /dev/null for stdin, stdout and
    stderr. The program waits until each has exec'd, reports ``started``, and exits."""
    body = """\
PY = [_sys.executable, "-S", "-c", "import time\\nwhile True:\\n    time.sleep(60)", P["marker"]]
SLEEP = None
for cand in ("/usr/bin/sleep", "/bin/sleep"):
    if _os.path.exists(cand):
        SLEEP = [cand, P["sleep_arg"]]
        break
def start(how, argv):
    r, w = _os.pipe()  # not inherited across exec: EOF once the program runs
    pid = _os.fork()
    if pid == 0:
        try:
            _os.close(r)
            null = _os.open("/dev/null", _os.O_RDWR)  # as daemons do: the call's pipes are not theirs
            for fd in (0, 1, 2):
                _os.dup2(null, fd)
            if how in ("setsid", "daemon"):
                _os.setsid()
            if how == "daemon" and _os.fork() > 0:
                _os._exit(0)
            _os.execv(argv[0], argv)
        finally:
            _os._exit(127)
    _os.close(w)
    while _os.read(r, 1):
        pass
    _os.close(r)
    if how == "daemon":
        _os.waitpid(pid, 0)
    return how
started = []
for how in ("background", "setsid", "daemon"):
    try:
        started.append(start(how, PY))
    except OSError as e:
        report(error=how + ": " + str(e))
if SLEEP:
    try:
        started.append(start("setsid", SLEEP) + " sleep")
    except OSError as e:
        report(error="sleep: " + str(e))
report(started=started)
"""
    return _program({"marker": marker, "sleep_arg": sleep_arg}, body)


def process_leftovers(*, markers: list[str]) -> str:
    """The processes a later call sees whose argv or name holds one of ``markers``: reports
    ``survivors`` (pid and command line)."""
    body = """\
found = []
me = _os.getpid()
for name in _os.listdir("/proc"):
    if not name.isdigit() or int(name) == me:
        continue
    try:
        with open("/proc/%s/cmdline" % name, "rb") as f:
            cmd = f.read().replace(b"\\0", b" ").decode("utf-8", "replace")
        with open("/proc/%s/comm" % name) as f:
            comm = f.read().strip()
    except OSError:
        continue
    if any(m in cmd or m == comm for m in P["markers"]):
        found.append("%s %s" % (name, (cmd or "[" + comm + "]")[:120]))
report(survivors=found)
"""
    return _program({"markers": markers}, body)


def fork_bomb(*, comm: str, hold: float = 3.0) -> str:
    """A fork bomb named ``comm``: every process keeps forking (sleeping 50 ms after a refused
    fork); the first one leaves after ``hold`` seconds, which ends the call, and the sandbox must
    then end the others (or the wall-clock limit ends it all, if shorter). Its output goes to
    /dev/null: it prints nothing, and the call's pipes end with the call even where its
    processes do not."""
    body = """\
set_comm(P["comm"])
_null = _os.open("/dev/null", _os.O_RDWR)
for _fd in (0, 1, 2):
    _os.dup2(_null, _fd)
_first, _end = _os.getpid(), _time.monotonic() + P["hold"]
while True:
    if _os.getpid() == _first and _time.monotonic() > _end:
        _os._exit(0)
    try:
        _os.fork()
    except OSError:
        _time.sleep(0.05)
"""
    return _program({"comm": comm, "hold": hold}, _LIBC, body)


def holder(*, ready: str, cap: int, hold: float) -> str:
    """Fork children until a fork is refused (or ``cap``), name itself ``ready``, report
    ``held``, hold them ``hold`` seconds, then end them."""
    body = """\
import select as _select
release_r, release_w = _os.pipe()
kids = []
error = ""
while len(kids) < P["cap"]:
    try:
        pid = _os.fork()
    except OSError as e:
        error = str(e)
        break
    if pid == 0:
        _os.close(release_w)
        _select.select([release_r], [], [], P["hold"] + 5)
        _os._exit(0)
    kids.append(pid)
set_comm(P["ready"])
report(held=len(kids), refused=error)
_time.sleep(P["hold"])
_os.close(release_w)
for pid in kids:
    _os.waitpid(pid, 0)
report(finished=True)
"""
    return _program({"ready": ready, "cap": cap, "hold": hold}, _LIBC, body)


def forker(nonce: str, forks: int) -> tuple[str, str]:
    """The bystander of the process-isolation check: fork and reap ``forks`` children."""
    return bystander(nonce, forks=forks)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def valid_entry_point(name: Any) -> bool:
    """Whether ``name`` can be a Python function's name (the programs define it)."""
    return isinstance(name, str) and bool(_IDENT.match(name)) and name not in {"None", "True", "False"}
