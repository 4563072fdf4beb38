"""What a container needs to host sandboxes: the security options of ``docker run``.

bubblewrap creates a user namespace and mounts inside it. Docker's default seccomp profile
allows neither to a process without ``CAP_SYS_ADMIN`` (the server runs without any capability),
and Docker masks parts of ``/proc``, which makes the kernel refuse a new ``/proc`` mount. So a
container whose server sandboxes code runs with:

* ``seccomp=<profile>``: :func:`seccomp_profile`, which allows what bubblewrap needs
  (``unshare``/``clone`` of namespaces, ``mount``, ``umount2``, ``pivot_root``) and keeps
  Docker's other refusals (kernel modules, kexec, keyrings, BPF, ``perf_event_open``,
  ``ptrace``, ``process_vm_*``, ``userfaultfd``, ``io_uring``, file handles, the new mount API,
  clock and swap changes, ``reboot``); architectures other than the host's are killed;
* ``systempaths=unconfined``: an unmasked ``/proc``, so the sandbox can mount its own (its
  memory watchdog reads it); the server is unprivileged and capability-less, so the unmasked
  files it could now read are readable only by root or hold nothing of other containers;
* ``apparmor=unconfined`` where the engine uses AppArmor (its ``docker-default`` profile
  denies ``mount``).

Submitted code never runs under these options alone: inside, the sandbox applies its own
seccomp filter (denying namespaces and mounts again), Landlock and its namespaces.
"""

from __future__ import annotations

import json
import platform
from typing import Any

__all__ = ["container_security_options", "seccomp_profile"]

_ARCHES = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}
#: Refused with EPERM in a sandbox-hosting container (the server's processes).
DENIED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "init_module",
    "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load",
    "kexec_load", "keyctl", "lookup_dcookie", "mount_setattr", "move_mount", "name_to_handle_at",
    "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open", "pidfd_getfd", "process_vm_readv",
    "process_vm_writev", "ptrace", "query_module", "quotactl", "quotactl_fd", "reboot", "request_key",
    "setns", "settimeofday", "stime", "swapoff", "swapon", "sysfs", "syslog", "uselib", "userfaultfd",
    "ustat", "vm86", "vm86old", "_sysctl",
)  # fmt: skip


def seccomp_profile(machine: str | None = None) -> dict[str, Any]:
    """The seccomp profile (Docker's JSON format) for a container that hosts sandboxes."""
    arch = _ARCHES.get(machine or platform.machine())
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [arch] if arch else [],
        "syscalls": [{"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
    }


def container_security_options(*, apparmor: bool = False) -> list[str]:
    """``docker run --security-opt`` values (the Docker SDK's ``security_opt``) for a container
    whose server sandboxes code; ``apparmor``: the engine confines containers with AppArmor."""
    opts = [f"seccomp={json.dumps(seccomp_profile())}", "systempaths=unconfined"]
    if apparmor:
        opts.append("apparmor=unconfined")
    return opts
