"""The sandboxed child: confines itself, then runs untrusted code.

Run by :mod:`coding_env.sandbox` as ``python -I -S -B _runner.py`` with a JSON request on
stdin. Standard library only (it runs with ``-S``). Confinement, in order, each layer
independent of the others:

1. ``unshare(CLONE_NEWNET)`` when started as root: a network namespace with only a down
   loopback;
2. when root, drop to the unprivileged ``nobody`` user (65534), no supplementary groups;
3. resource limits: CPU seconds, address space, file size, open files, processes;
4. not dumpable: other processes of the same user cannot read this one's ``/proc`` entries;
5. ``no_new_privs``, then Landlock (Linux 5.13+): reads only below the interpreter's and the
   system's directories, writes only below the private directory, no TCP bind/connect, no
   signals or abstract UNIX sockets reaching outside the sandbox (ABI 6);
6. a seccomp filter: only ``AF_UNIX`` sockets, no ``setsid``/``setpgid`` (so the whole tree
   stays in the process group the parent kills), no ``ptrace``, ``process_vm_*``,
   ``io_uring``, and ``kill``/``tgkill`` only of this process or its own group.

The layers that could be applied are reported on the results fd (``results_fd``) before the code runs
(``{"isolation": [...]}``); the parent refuses to run code when a required one is missing.
Results of ``mode == "tests"`` go to that fd as one JSON line per test case, written as each
finishes, so the cases done before a timeout still count.
"""

# ruff: noqa: N806  (BPF opcodes and return values keep their C names)
import ctypes
import json
import os
import platform
import resource
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# Syscall numbers by machine: (socket, setsid, setpgid, ptrace, process_vm_readv,
# process_vm_writev, kill, tkill, tgkill, io_uring_setup).
_NR = {
    "x86_64": (41, 112, 109, 101, 310, 311, 62, 200, 234, 425),
    "aarch64": (198, 157, 154, 117, 270, 271, 129, 130, 131, 425),
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_LANDLOCK_CREATE, _LANDLOCK_ADD, _LANDLOCK_RESTRICT = 444, 445, 446


def _err(what):
    e = ctypes.get_errno()
    return f"{what}: {os.strerror(e)}"


def _unshare_net():
    if os.geteuid() != 0:
        return None
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        return None
    return "netns"


def _drop_root():
    if os.geteuid() != 0:
        return None
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    return "unprivileged-user"


def _count_tasks(uid):
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


def _limits(lim):
    cpu = int(lim["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_bytes"], lim["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_bytes"], lim["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["open_files"], lim["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # RLIMIT_NPROC counts every task of the user, the server's threads included when they
    # share it (an image's single user): allow this many more than exist now.
    nproc = _count_tasks(os.getuid()) + lim["processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return "rlimits"


def _not_dumpable():
    return "not-dumpable" if libc.prctl(4, 0, 0, 0, 0) == 0 else None  # PR_SET_DUMPABLE


def _landlock(read_paths, write_paths):
    abi = libc.syscall(_LANDLOCK_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return None
    fs_bits = [13, 14, 15, 15, 16, 16, 16][min(abi, 7) - 1]  # access rights known by each ABI
    handled_fs = (1 << fs_bits) - 1
    handled_net = 0b11 if abi >= 4 else 0  # BIND_TCP, CONNECT_TCP
    scoped = 0b11 if abi >= 6 else 0  # ABSTRACT_UNIX_SOCKET, SIGNAL
    attr = struct.pack("QQQ", handled_fs, handled_net, scoped)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    buf = ctypes.create_string_buffer(attr[:size], size)
    fd = libc.syscall(_LANDLOCK_CREATE, buf, size, 0)
    if fd < 0:
        return None
    read = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
    file_rights = (1 << 0) | (1 << 1) | (1 << 2) | ((1 << 14) if abi >= 3 else 0)
    try:
        for path, rights in [(p, read) for p in read_paths] + [(p, handled_fs) for p in write_paths]:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    rights &= file_rights
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, pfd), 12)
                if libc.syscall(_LANDLOCK_ADD, fd, 1, rule, 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
                    raise OSError(_err(f"landlock_add_rule {path}"))
            finally:
                os.close(pfd)
        if libc.syscall(_LANDLOCK_RESTRICT, fd, 0) != 0:
            raise OSError(_err("landlock_restrict_self"))
    finally:
        os.close(fd)
    return f"landlock-abi{abi}"


def _seccomp():
    machine = platform.machine()
    if machine not in _NR:
        return None
    socket, setsid, setpgid, ptrace, vm_r, vm_w, kill, tkill, tgkill, uring = _NR[machine]
    pid = os.getpid()
    EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    ALLOW = 0x7FFF0000
    KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a foreign architecture
    LD, JEQ, RET = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    prog = []

    def ins(code, k, jt=0, jf=0):
        prog.append(struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF))

    ins(LD, 4)  # arch
    ins(JEQ, _AUDIT_ARCH[machine], 1, 0)
    ins(RET, KILL)
    ins(LD, 0)  # syscall number
    ins(0x35, 0x40000000, 0, 1)  # JGE: x32 syscalls on x86_64
    ins(RET, EPERM)
    for nr in (setsid, setpgid, ptrace, vm_r, vm_w, tkill, uring):
        ins(JEQ, nr, 0, 1)
        ins(RET, EPERM)
    # socket(domain, ...): AF_UNIX only
    ins(JEQ, socket, 0, 4)
    ins(LD, 16)  # args[0], low word
    ins(JEQ, 1, 0, 1)
    ins(RET, ALLOW)
    ins(RET, EPERM)
    # kill(pid, sig) and tgkill(tgid, ...): only this process or its own group (pid 0)
    ins(JEQ, kill, 1, 0)
    ins(JEQ, tgkill, 0, 5)
    ins(LD, 16)
    ins(JEQ, 0, 2, 0)
    ins(JEQ, pid, 1, 0)
    ins(RET, EPERM)
    ins(RET, ALLOW)
    ins(RET, ALLOW)
    code = b"".join(prog)
    filt = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filt))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(22, 2, fbuf, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(_err("seccomp"))
    return "seccomp"


def _plain(value):
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


def main():
    req = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull)
    out = os.fdopen(req["results_fd"], "w", buffering=1)
    layers = []
    for step in (
        _unshare_net,
        _drop_root,
        lambda: _limits(req["limits"]),
        _not_dumpable,
        lambda: None if libc.prctl(38, 1, 0, 0, 0) else "no-new-privs",  # PR_SET_NO_NEW_PRIVS
        lambda: _landlock(req["read_paths"], [req["workdir"], "/dev/null"]),
        _seccomp,
    ):
        try:
            layer = step()
        except OSError as e:
            out.write(json.dumps({"error": str(e)}) + "\n")
            return 70
        if layer:
            layers.append(layer)
    out.write(json.dumps({"isolation": layers}) + "\n")
    missing = [r for r in req.get("require", []) if not any(layer.startswith(r) for layer in layers)]
    if missing:
        return 71
    os.chdir(req["workdir"])
    sys.path[:0] = [req["workdir"]]
    source = compile(req["code"], "solution.py", "exec", dont_inherit=True)
    if req["mode"] == "run":
        ns = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(source, ns)
        return 0
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(source, ns)
    except BaseException as e:  # noqa: BLE001 - reported per test case
        out.write(json.dumps({"load_error": f"{type(e).__name__}: {e}"[:2000]}) + "\n")
        return 1
    fn = ns.get(req["entry_point"])
    if not callable(fn):
        out.write(json.dumps({"load_error": f"no function named {req['entry_point']!r}"}) + "\n")
        return 1
    for i, args in enumerate(req["cases"]):
        try:
            got = {"case": i, "value": _plain(fn(*args))}
        except BaseException as e:  # noqa: BLE001
            got = {"case": i, "error": f"{type(e).__name__}: {e}"[:500]}
        try:
            out.write(json.dumps(got) + "\n")
        except (TypeError, ValueError, RecursionError):
            out.write(json.dumps({"case": i, "error": "unserialisable result"}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
