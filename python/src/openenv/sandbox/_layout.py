"""What the sandbox sees: its interpreter, the read-only runtime mounted into it, and what is
hidden from it; and the bubblewrap command line that builds that view.

The view holds the system's libraries and programs (``/usr`` and its ``/bin``, ``/lib``...), the
interpreter's own prefix when it lives elsewhere (e.g. a pyenv build), a synthetic ``/etc``
(a passwd and group naming the sandbox's user, ``hosts``, the dynamic linker's cache), a fresh
``/proc`` and a ``/dev`` of null, zero, full, random and urandom. Every ``site-packages`` and
``dist-packages`` directory below those, and every directory of the server's own ``sys.path``
that falls below them (editable installs, the environment's package), is covered with an
empty read-only tmpfs: the environment's code, its data and its answers are not in the view.
Nothing of the host's ``/tmp``, ``/run``, ``/var``, ``/home``, ``/root``, ``/opt`` or ``/srv`` is
mounted: no host UNIX socket is reachable by path.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["Interpreter", "View", "bwrap_path", "find_interpreter", "view_for"]

#: The sandbox's user and group inside its user namespace.
SANDBOX_UID = 1000
WORKSPACE = "/workspace"
OPENENV_DIR = "/.openenv"
#: What the sandbox mounts of its own: no host directory may be mounted over or below these.
_OWN = ("/tmp", WORKSPACE, "/box", "/dev", "/proc", OPENENV_DIR, "/etc")
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/os-release")
_ETC_DIRS = ("/etc/ld.so.conf.d", "/etc/alternatives")
_PACKAGE_DIRS = (
    "lib/python3*/site-packages",
    "lib/python3*/dist-packages",
    "lib/python3/dist-packages",
    "lib64/python3*/site-packages",
    "local/lib/python3*/site-packages",
    "local/lib/python3*/dist-packages",
)
_DESCRIBE = (
    "import json, sys, sysconfig; p = sysconfig.get_paths(); "
    "print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix, 'base_prefix': sys.base_prefix, "
    "'path': sys.path, 'version': '%d.%d.%d' % sys.version_info[:3], "
    "'paths': {k: p.get(k) for k in ('stdlib', 'platstdlib', 'purelib', 'platlib')}}))"
)


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """The Python that runs inside the sandbox (its paths are the same inside and out)."""

    executable: str
    prefix: str
    version: str
    stdlib: tuple[str, ...]  # the directories its ``-I -S`` sys.path holds
    packages: tuple[str, ...]  # its site-packages directories (hidden)


@dataclasses.dataclass(frozen=True)
class View:
    """The mount view: read-only roots, symlinks, hidden directories and synthetic files."""

    interpreter: Interpreter
    roots: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]  # (target, link)
    hidden: tuple[str, ...]
    etc_files: tuple[str, ...]
    etc_dirs: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()  # (target, link): made by the caller (Sandbox(links=...))

    @property
    def read_paths(self) -> list[str]:
        """What submitted code may read (Landlock's read rules, a second line behind the view)."""
        links = [link for _, link in self.symlinks]
        return sorted({*self.roots, *links, "/etc", "/proc", "/dev", OPENENV_DIR})


def bwrap_path() -> str | None:
    """The bubblewrap binary (``$OPENENV_BWRAP`` or ``bwrap`` on PATH), if any."""
    path = os.environ.get("OPENENV_BWRAP") or shutil.which("bwrap")
    return path if path and os.access(path, os.X_OK) else None


def _reachable(path: str, uid: int | None) -> bool:
    """Whether ``uid`` (None: this process) can read and execute ``path``."""
    if uid is None or uid == os.geteuid():
        return os.access(path, os.R_OK | os.X_OK)
    p = Path(path).resolve()
    try:
        st = p.stat()
        if not (st.st_mode & stat.S_IROTH and st.st_mode & stat.S_IXOTH):
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in p.parents)
    except OSError:
        return False


@functools.lru_cache(maxsize=16)
def _describe(executable: str) -> dict[str, object] | None:
    try:
        out = subprocess.run(
            [executable, "-I", "-S", "-c", _DESCRIBE], capture_output=True, timeout=60, check=True, env={}
        ).stdout
        info: dict[str, object] = json.loads(out)
        return info
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _base_executable() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def find_interpreter(explicit: str | None = None, uid: int | None = None) -> Interpreter | None:
    """The sandbox's Python: ``explicit``, else the server's base interpreter (never a
    virtualenv's, whose packages are the server's), else the system's ``python3``; the first
    that ``uid`` can run. None when there is none."""
    candidates = [explicit] if explicit else [_base_executable(), "/usr/bin/python3", "/usr/local/bin/python3"]
    for cand in candidates:
        if not cand or not os.path.exists(cand):
            continue
        real = os.path.realpath(cand)
        if not _reachable(real, uid):
            continue
        info = _describe(real)
        if info is None:
            continue
        paths = info["paths"]
        assert isinstance(paths, dict)
        path = [str(p) for p in info["path"] if p]  # type: ignore[attr-defined]
        stdlib = tuple(p for p in path if os.path.isdir(p))
        packages = tuple(str(paths[k]) for k in ("purelib", "platlib") if paths.get(k))
        if not all(_reachable(p, uid) for p in stdlib):
            continue
        return Interpreter(real, str(info["base_prefix"]), str(info["version"]), stdlib, packages)
    return None


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def view_for(
    interp: Interpreter,
    hide: Sequence[str] = (),
    readable: Sequence[str] = (),
    links: Mapping[str, str] | None = None,
) -> View:
    """The mount view for ``interp``: what is mounted read-only, what is hidden in it, and the
    symbolic links a caller asked for (``{link: target}``)."""
    roots = {"/usr"}
    symlinks: list[tuple[str, str]] = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            symlinks.append((os.readlink(d), d))
        elif os.path.isdir(d):
            roots.add(d)
    exe_dir = os.path.dirname(interp.executable)
    for p in (interp.prefix, exe_dir, *interp.stdlib):
        if not _under(p, roots):
            roots.add(interp.prefix if _under(p, [interp.prefix]) else p)
    for r in readable:
        real = os.path.realpath(r)
        if _under(real, _OWN) or any(_under(o, [real]) for o in _OWN):
            raise ValueError(f"{r!r} cannot be mounted: it overlaps the sandbox's own {', '.join(_OWN)}")
        roots.add(real)
    hidden: set[str] = set()
    for root in roots:
        for pattern in _PACKAGE_DIRS:
            hidden.update(d for d in glob.glob(os.path.join(root, pattern)) if os.path.isdir(d))
    hidden.update(p for p in interp.packages if os.path.isdir(p) and _under(p, roots))
    stdlib = set(interp.stdlib)
    for entry in (*sys.path, *hide):
        if not entry:
            continue
        real = os.path.realpath(entry)
        if os.path.isfile(real):
            real = os.path.dirname(real)
        if real in stdlib or not os.path.isdir(real) or real in roots or not _under(real, roots):
            continue
        if any(s.startswith(real.rstrip("/") + "/") for s in stdlib):
            continue  # a parent of the interpreter's own library: its children are hidden instead
        hidden.add(real)
    # A hidden directory below another hidden one needs no mount of its own.
    ordered = sorted(hidden)
    kept = [h for h in ordered if not any(h != o and h.startswith(o.rstrip("/") + "/") for o in ordered)]
    made: list[tuple[str, str]] = []
    taken = [*roots, *(link for _, link in symlinks), *_OWN]
    for link, target in (links or {}).items():
        norm = os.path.normpath(link)
        if not os.path.isabs(link) or norm == "/" or any(_under(norm, [t]) or _under(t, [norm]) for t in taken):
            raise ValueError(
                f"link {link!r} must be a new absolute path outside the sandbox's mounts ({', '.join(taken)})"
            )
        if not os.path.isabs(target):
            raise ValueError(f"link {link!r}: its target {target!r} must be an absolute path")
        made.append((target, norm))
        taken.append(norm)
    return View(
        interp,
        tuple(sorted(roots)),
        tuple(symlinks),
        tuple(kept),
        tuple(f for f in _ETC_FILES if os.path.exists(f)),
        tuple(d for d in _ETC_DIRS if os.path.isdir(d)),
        tuple(made),
    )


def etc_passwd() -> bytes:
    return (
        "root:x:0:0:root:/root:/bin/sh\n"
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{WORKSPACE}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    ).encode()


def etc_group() -> bytes:
    return f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n".encode()


ETC_HOSTS = b"127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n"


def bwrap_argv(
    bwrap: str,
    view: View,
    *,
    data_fds: dict[str, int],
    ctl_fd: int,
    info_fd: int,
    proc: bool,
    env: dict[str, str],
) -> list[str]:
    """The command that starts the supervisor in a new sandbox. ``data_fds`` maps paths inside
    the sandbox to readable fds whose content becomes that (read-only) file."""
    a = [bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    a += ["--unshare-cgroup-try"]
    a += ["--new-session", "--as-pid-1", "--info-fd", str(info_fd)]
    a += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    # The supervisor mounts the session's box and sets its namespaces' limits (user namespaces,
    # IPC), then drops these (and every) capability before any call.
    a += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SYS_RESOURCE", "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    for root in view.roots:
        a += ["--ro-bind", root, root]
    for target, link in view.symlinks:
        a += ["--symlink", target, link]
    for h in view.hidden:
        a += ["--perms", "0555", "--tmpfs", h, "--remount-ro", h]
    a += ["--dir", "/etc", "--dir", OPENENV_DIR]
    for f in view.etc_files:
        a += ["--ro-bind", f, f]
    for d in view.etc_dirs:
        a += ["--ro-bind", d, d]
    for path, fd in data_fds.items():
        a += ["--ro-bind-data", str(fd), path]
    if proc:
        a += ["--proc", "/proc"]
    # /dev: a tmpfs of the harmless devices (bwrap's own --dev leaves the sandbox unable to mount).
    a += ["--tmpfs", "/dev"]
    for dev in ("null", "zero", "full", "random", "urandom"):
        a += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        a += ["--symlink", target, f"/dev/{name}"]
    a += ["--symlink", "/proc/self/fd/2", "/dev/stderr", "--dir", "/dev/shm", "--remount-ro", "/dev"]
    a += ["--dir", WORKSPACE, "--dir", "/tmp", "--dir", "/box"]
    for target, link in view.links:
        a += ["--symlink", target, link]
    a += ["--remount-ro", "/"]
    a += ["--chdir", "/"]
    a += ["--", view.interpreter.executable, "-I", "-S", "-B", f"{OPENENV_DIR}/supervisor.py", str(ctl_fd)]
    return a
