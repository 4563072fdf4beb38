"""A git repository written as plain files, without git: the starting workspace of the git
task families (``.git/`` with loose objects, an index, a branch), the same bytes on every
machine, so that the generator stays a pure function of its seed.

What you may rely on: :func:`git_repo` returns the files of a repository whose ``main``
branch holds ``commits`` in order (each commit's files replace the previous snapshot's, a
``None`` content deletes a file), checked out with a matching index, and the hex id of every
commit; git reads it as any clone (``git log``, ``git status`` clean, ``git commit``). Files sit
at the top level of the work tree (no subdirectories) with mode 100644.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Mapping, Sequence

__all__ = ["git_repo"]

_AUTHOR = "Dev Eloper <dev@example.invalid>"


def _object(kind: str, body: bytes, out: dict[str, bytes]) -> bytes:
    raw = f"{kind} {len(body)}\0".encode() + body
    sha = hashlib.sha1(raw).digest()  # git's object id (not a security use)
    hexsha = sha.hex()
    out[f".git/objects/{hexsha[:2]}/{hexsha[2:]}"] = zlib.compress(raw, 6)
    return sha


def _index(entries: Sequence[tuple[str, bytes, int]]) -> bytes:
    """A version 2 index of ``(path, blob id, size)``; zero stat fields (git re-reads those
    files once, finds them equal, and refreshes the index)."""
    body = b"DIRC" + struct.pack(">II", 2, len(entries))
    for path, sha, size in sorted(entries):
        name = path.encode()
        entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, 0o100644, 0, 0, size) + sha + struct.pack(">H", len(name))
        entry += name
        entry += b"\0" * (8 - (len(entry) % 8))  # 1 to 8 NULs: the entry's length a multiple of 8
        body += entry
    return body + hashlib.sha1(body).digest()


def git_repo(
    commits: Sequence[tuple[str, Mapping[str, str | None]]], *, start: int = 1_767_225_600, branch: str = "main"
) -> tuple[dict[str, bytes], list[str]]:
    """The files of a repository (``.git/`` and the checked-out work tree) and the commit ids,
    oldest first. ``commits`` are ``(message, changes)``; commit ``i`` is dated ``start + 3600 * i``."""
    out: dict[str, bytes] = {}
    tree_files: dict[str, str] = {}
    parent: bytes | None = None
    ids: list[str] = []
    blobs: dict[str, bytes] = {}
    for i, (message, changes) in enumerate(commits):
        for path, text in changes.items():
            if "/" in path:
                raise ValueError(f"{path}: top-level files only")
            if text is None:
                tree_files.pop(path, None)
            else:
                tree_files[path] = text
        tree = b""
        for path in sorted(tree_files):
            blobs[path] = _object("blob", tree_files[path].encode(), out)
            tree += f"100644 {path}\0".encode() + blobs[path]
        tree_id = _object("tree", tree, out)
        when = f"{start + 3600 * i} +0000"
        body = f"tree {tree_id.hex()}\n" + (f"parent {parent.hex()}\n" if parent else "")
        body += f"author {_AUTHOR} {when}\ncommitter {_AUTHOR} {when}\n\n{message}\n"
        parent = _object("commit", body.encode(), out)
        ids.append(parent.hex())
    out[".git/HEAD"] = f"ref: refs/heads/{branch}\n".encode()
    out[".git/config"] = (
        b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
        b"[user]\n\tname = Dev Eloper\n\temail = dev@example.invalid\n"
    )
    out[".git/description"] = b"a task's repository\n"
    out[f".git/refs/heads/{branch}"] = f"{ids[-1]}\n".encode()
    out[".git/index"] = _index([(p, blobs[p], len(tree_files[p].encode())) for p in tree_files])
    for path, text in tree_files.items():
        out[path] = text.encode()
    return out, ids
