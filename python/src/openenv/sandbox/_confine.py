"""Confinement of one call's process, applied by the sandbox's supervisor in the child it forks
for the call, before any submitted code runs. Standard library only: this file is copied into
the sandbox and runs under the sandbox's interpreter (``python -I -S``, 3.8 or newer), never
imported by the server.

Layers, each independent of the others (the mount, PID, IPC, network, UTS and user namespaces
are bubblewrap's, set up before the supervisor starts):

* resource limits: address space per process, CPU seconds per process, processes and threads
  (counted in the sandbox's own user namespace, so another session's or the server's
  processes never count), open files, file size, no core dumps;
* ``oom_score_adj`` 1000: under memory pressure the kernel kills submitted code first;
* not dumpable, ``no_new_privs``, no capabilities;
* Landlock (Linux 5.13+): reads only below the runtime's directories, writes only below the
  writable ones, no TCP bind/connect, no signals or abstract UNIX sockets reaching outside the
  call's Landlock domain (ABI 6);
* seccomp: only ``AF_UNIX`` sockets; no new namespaces (``unshare``, ``setns``, ``clone`` with
  a namespace flag, ``clone3``); no mounts, ``ptrace``, ``process_vm_*``, ``io_uring``, keyrings,
  BPF, ``userfaultfd``, ``perf_event_open``, file handles, kernel modules, ``memfd_create``,
  SysV IPC or POSIX message queues (memory that no process's resident set shows); without
  namespaces (an explicitly weaker sandbox) also no ``setsid``/``setpgid`` (so the process group
  the supervisor kills holds every descendant).
"""

# ruff: noqa: N806  (BPF opcodes and return values keep their C names)
from __future__ import annotations

import ctypes
import os
import platform
import resource
import struct
from typing import Any

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

_LANDLOCK_CREATE, _LANDLOCK_ADD, _LANDLOCK_RESTRICT = 444, 445, 446
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Syscall numbers by machine.
# fmt: off
_NR = {
    "x86_64": {
        "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435, "unshare": 272, "setns": 308,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "userfaultfd": 323, "perf_event_open": 298, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "quotactl": 179, "acct": 163, "swapon": 167,
        "swapoff": 168, "reboot": 169, "syslog": 103, "mq_open": 240, "memfd_create": 319,
        "memfd_secret": 447, "pidfd_getfd": 438, "setsid": 112, "setpgid": 109, "shmget": 29,
        "semget": 64, "msgget": 68, "kill": 62, "tkill": 200, "tgkill": 234,
    },
    "aarch64": {
        "socket": 198, "socketpair": 199, "clone": 220, "clone3": 435, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "userfaultfd": 282, "perf_event_open": 241, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "quotactl": 60, "acct": 89, "swapon": 224,
        "swapoff": 225, "reboot": 142, "syslog": 116, "mq_open": 180, "memfd_create": 279,
        "memfd_secret": 447, "pidfd_getfd": 438, "setsid": 157, "setpgid": 154, "shmget": 194,
        "semget": 190, "msgget": 186, "kill": 129, "tkill": 130, "tgkill": 131,
    },
}
#: Denied with EPERM in every sandbox.
DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "ptrace", "process_vm_readv",
    "process_vm_writev", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key",
    "request_key", "bpf", "userfaultfd", "perf_event_open", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "quotactl", "acct", "swapon", "swapoff",
    "reboot", "syslog", "mq_open", "memfd_create", "memfd_secret", "pidfd_getfd",
    # SysV IPC: its memory is in no process's resident set, and the sandbox's IPC namespace
    # cannot be bounded by an unprivileged user (its sysctls belong to the namespace's root).
    "shmget", "semget", "msgget",
)
# fmt: on
#: Denied too when the sandbox has no namespaces of its own (the supervisor kills the call's
#: process group, which must hold every descendant).
DENIED_WITHOUT_NAMESPACES = ("setsid", "setpgid")
#: clone() flags that create a namespace (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
#: NEWPID, NEWNET).
CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


def _err(what: str) -> str:
    return f"{what}: {os.strerror(ctypes.get_errno())}"


def limits(lim: dict[str, Any], namespaces: bool) -> str:
    """Resource limits of the call's processes (inherited by every descendant)."""
    cpu = int(lim["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_bytes"], lim["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["disk_bytes"], lim["disk_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["open_files"], lim["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
    if namespaces:
        # Counted per user namespace (Linux 5.14+): the supervisor and this call's tasks only.
        nproc = lim["processes"] + 1
    else:
        # One user for everything: allow this many more tasks than the user has now.
        nproc = _count_tasks(os.getuid()) + lim["processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return "rlimits"


def _count_tasks(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return n


def oom_first() -> str | None:
    """Make this process (and its descendants) the kernel's first choice under memory pressure."""
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self is the process's own again (not_dumpable follows)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        return "oom-first"
    except OSError:
        return None


def not_dumpable() -> str | None:
    return "not-dumpable" if libc.prctl(4, 0, 0, 0, 0) == 0 else None  # PR_SET_DUMPABLE


def no_new_privs() -> str | None:
    return "no-new-privs" if libc.prctl(38, 1, 0, 0, 0) == 0 else None  # PR_SET_NO_NEW_PRIVS


def drop_capabilities() -> str:
    """Empty the bounding, ambient, permitted, effective and inheritable sets."""
    for cap in range(64):  # needs CAP_SETPCAP; without it the bounding set grants nothing anyway
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP; EINVAL: past the last
            break
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two empty __user_cap_data_struct
    if libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        raise OSError(_err("capset"))
    return "no-capabilities"


def landlock(read_paths: list[str], write_paths: list[str]) -> str | None:
    """Reads only below ``read_paths``, writes below ``write_paths``; no TCP; scoped signals and
    abstract UNIX sockets. None when the kernel has no Landlock."""
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
    file_rights = (1 << 0) | (1 << 1) | (1 << 2) | ((1 << 14) if abi >= 3 else 0) | ((1 << 15) if abi >= 5 else 0)
    rules = [("/", 1 << 3)]  # READ_DIR of the root: listing the (minimal) view is harmless
    rules += [(p, read) for p in read_paths] + [(p, handled_fs) for p in write_paths]
    try:
        for path, rights in rules:
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


def seccomp(namespaces: bool, pid: int) -> str | None:
    """Install the call's seccomp filter (inherited by every descendant, kept across exec).

    Without namespaces, signals reach only the call's process group (``kill(0)``,
    ``kill(-pid)``) or its first process (``pid``): nothing else of the user's."""
    machine = platform.machine()
    if machine not in _NR:
        return None
    nr = _NR[machine]
    EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    ENOSYS = 0x00050000 | 38  # clone3: libc falls back to clone, which is checked below
    ALLOW = 0x7FFF0000
    KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a foreign architecture
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    prog: list[bytes] = []

    def ins(code: int, k: int, jt: int = 0, jf: int = 0) -> None:
        prog.append(struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF))

    ins(LD, 4)  # arch
    ins(JEQ, _AUDIT_ARCH[machine], 1, 0)
    ins(RET, KILL)
    ins(LD, 0)  # syscall number
    ins(JGE, 0x40000000, 0, 1)  # x32 syscalls on x86_64
    ins(RET, EPERM)
    denied = DENIED + (() if namespaces else DENIED_WITHOUT_NAMESPACES)
    for name in denied:
        ins(JEQ, nr[name], 0, 1)
        ins(RET, EPERM)
    ins(JEQ, nr["clone3"], 0, 1)
    ins(RET, ENOSYS)
    # socket(domain, ...) and socketpair(domain, ...): AF_UNIX only
    ins(JEQ, nr["socket"], 1, 0)
    ins(JEQ, nr["socketpair"], 0, 4)
    ins(LD, 16)  # args[0], low word
    ins(JEQ, 1, 0, 1)
    ins(RET, ALLOW)
    ins(RET, EPERM)
    # clone(flags, ...): no namespace flags
    ins(JEQ, nr["clone"], 0, 4)
    ins(LD, 16)
    ins(JSET, CLONE_NS_FLAGS, 0, 1)
    ins(RET, EPERM)
    ins(RET, ALLOW)
    if not namespaces:
        ins(JEQ, nr["tkill"], 0, 1)
        ins(RET, EPERM)
        ins(JEQ, nr["kill"], 1, 0)
        ins(JEQ, nr["tgkill"], 0, 6)
        ins(LD, 16)
        ins(JEQ, 0, 3, 0)
        ins(JEQ, pid, 2, 0)
        ins(JEQ, -pid, 1, 0)
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


def no_user_namespaces() -> str:
    """The seccomp filter denies them (unshare, setns, clone with a namespace flag, clone3)."""
    return "no-user-namespaces"


def confine(req: dict[str, Any], namespaces: bool, pid: int) -> list[str]:
    """Every layer, in order; returns the layers applied. An OSError means the call must not run."""
    layers: list[str] = []
    steps = (
        lambda: limits(req["limits"], namespaces),
        oom_first,
        not_dumpable,
        drop_capabilities,
        no_new_privs,
        lambda: landlock(req["read_paths"], req["write_paths"]),
        lambda: seccomp(namespaces, pid),
        no_user_namespaces,
    )
    for step in steps:
        layer = step()
        if layer:
            layers.append(layer)
    return layers
