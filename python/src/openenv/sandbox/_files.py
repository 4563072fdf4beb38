"""Files in and out of a sandbox's workspace, for environments that keep a workspace per task.

:func:`put_files` writes files into the workspace (one call of the sandbox: a tar archive on
stdin, unpacked by a script of ours); :func:`get_files` reads the workspace back (one call: a
tar archive of it on stdout). Both programs run confined like any call and are immune to what
code left in the workspace: the workspace is taken off ``sys.path`` before they import
anything (a ``tarfile.py`` planted there is never imported), nothing is followed through a
symbolic link, and only regular files and directories are read; symbolic links, FIFOs, sockets
and devices are reported in :attr:`WorkspaceFiles.skipped`, never read or recreated.

A grader copies an agent's files into a workspace emptied first (:meth:`Sandbox.clear`), so
that what it reads there is plain data: no link into ``/proc`` or onto the grader's own input.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import posixpath
import tarfile
from collections.abc import Iterable, Mapping

from openenv.sandbox._box import Limits, Sandbox, SandboxError

__all__ = ["WorkspaceFiles", "get_files", "put_files", "safe_relpath"]

#: The first lines of both programs: nothing of the workspace on sys.path, then the imports.
_CLEAN_PATH = "import sys\nsys.path[:] = [p for p in sys.path if p and not p.startswith(('/workspace', '.'))]\n"

_EXTRACT = (
    _CLEAN_PATH
    + r"""
import io, os, stat, tarfile
data = sys.stdin.buffer.read()
with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as t:
    for m in t.getmembers():
        name = m.name
        if m.isdir():
            os.makedirs(name, exist_ok=True)
            os.chmod(name, (m.mode & 0o755) | 0o700)
        elif m.isfile():
            parent = os.path.dirname(name)
            if parent:
                os.makedirs(parent, exist_ok=True)
            try:
                if stat.S_ISLNK(os.lstat(name).st_mode) or not stat.S_ISREG(os.lstat(name).st_mode):
                    os.unlink(name)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(t.extractfile(m).read())
            os.chmod(name, (m.mode & 0o755) | 0o600)
"""
)

_EXPORT = (
    _CLEAN_PATH
    + r"""
import base64, io, os, stat, tarfile
EXCLUDE = set(sys.stdin.read().split("\n")) - {""}
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as t:
    for root, dirs, files in os.walk(".", followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(root, name)[2:]
            if path in EXCLUDE or path.split("/")[0] in EXCLUDE:
                if name in dirs:
                    dirs.remove(name)
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            info = tarfile.TarInfo(path)
            info.mode = st.st_mode & 0o777
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                with os.fdopen(fd, "rb") as f:
                    data = f.read()
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            elif stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                t.addfile(info)
            else:
                info.type = tarfile.FIFOTYPE  # a FIFO, socket or device: named, never read
                t.addfile(info)
sys.stdout.write(base64.b64encode(buf.getvalue()).decode())
"""
)


@dataclasses.dataclass
class WorkspaceFiles:
    """What :func:`get_files` read: regular files (bytes) with their permission bits, the
    directories, and what was not read (path -> ``"symlink -> TARGET"`` or ``"special"``)."""

    files: dict[str, bytes] = dataclasses.field(default_factory=dict)
    modes: dict[str, int] = dataclasses.field(default_factory=dict)
    dirs: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.files.values())


def safe_relpath(path: str) -> str:
    """``path`` normalised relative to the workspace; ValueError when it is absolute, empty,
    or leaves the workspace (``..``)."""
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ValueError(f"not a path: {path!r}")
    p = path.strip()
    if p.startswith("/workspace/"):
        p = p[len("/workspace/") :]
    if p.startswith("/"):
        raise ValueError(f"{path!r}: give a path relative to the workspace")
    norm = posixpath.normpath(p)
    if norm in (".", "") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"{path!r} is outside the workspace")
    return norm


def _archive(files: Mapping[str, bytes | str], modes: Mapping[str, int], dirs: Iterable[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as t:
        for d in sorted({safe_relpath(d) for d in dirs}):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            t.addfile(info)
        for path, content in sorted(files.items()):
            data = content.encode() if isinstance(content, str) else bytes(content)
            info = tarfile.TarInfo(safe_relpath(path))
            info.size = len(data)
            info.mode = modes.get(path, 0o644) & 0o755
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_files(
    box: Sandbox,
    files: Mapping[str, bytes | str],
    *,
    modes: Mapping[str, int] | None = None,
    dirs: Iterable[str] = (),
) -> None:
    """Write ``files`` (path relative to the workspace -> content; str is UTF-8) and create
    ``dirs`` in ``box``'s workspace. ``modes`` gives permission bits (default 0644; only the
    0755 bits are kept). A file of the same name is replaced (a link there is replaced, never
    followed).

    Raises:
        ValueError: a path is absolute or leaves the workspace.
        SandboxError: the files could not be written (e.g. the disk quota).
    """
    data = _archive(files, modes or {}, dirs)
    limits = dataclasses.replace(box.limits, wall_s=max(box.limits.wall_s, 30.0))
    r = box.run(_EXTRACT, stdin=data, limits=limits, isolated=True)
    if r.exit_code != 0:
        raise SandboxError(f"could not write the files into the sandbox (exit {r.exit_code}): {r.stderr[-500:]}")


def get_files(box: Sandbox, *, exclude: Iterable[str] = ()) -> WorkspaceFiles:
    """Read ``box``'s workspace: every regular file and directory, not below ``exclude``
    (paths or first components relative to the workspace).

    Raises:
        SandboxError: the workspace could not be read whole.
    """
    limits: Limits = box.limits
    limits = dataclasses.replace(
        limits, wall_s=max(limits.wall_s, 30.0), output_bytes=limits.disk_bytes * 4 // 3 + (1 << 20)
    )
    r = box.run(_EXPORT, stdin="\n".join(exclude).encode(), limits=limits, isolated=True)
    if r.exit_code != 0 or r.stdout.endswith("[output truncated]"):
        raise SandboxError(f"could not read the sandbox's workspace (exit {r.exit_code}): {r.stderr[-500:]}")
    try:
        raw = base64.b64decode(r.stdout.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise SandboxError(f"the workspace's archive is not base64: {e}") from None
    out = WorkspaceFiles()
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as t:
            for m in t.getmembers():
                try:
                    name = safe_relpath(m.name)
                except ValueError:
                    continue
                if m.isdir():
                    out.dirs.append(name)
                elif m.isfile():
                    f = t.extractfile(m)
                    out.files[name] = f.read() if f is not None else b""
                    out.modes[name] = m.mode & 0o777
                elif m.issym():
                    out.skipped[name] = f"symlink -> {m.linkname}"
                else:
                    out.skipped[name] = "special"
    except tarfile.TarError as e:
        raise SandboxError(f"the workspace's archive is unreadable: {e}") from None
    return out
