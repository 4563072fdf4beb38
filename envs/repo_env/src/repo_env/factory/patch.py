"""Applying a unified diff in git's format (what :func:`repo_env.diff.git_diff` writes) to
files in memory: the factory's check that a reference patch restores the pristine files, and
how an exported instance's repository is rebuilt from the pristine tree and its bug."""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PatchError", "apply_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The patch does not apply: a context or removed line is not where it says."""


def apply_patch(files: Mapping[str, str], patch: str) -> dict[str, str]:
    """``files`` (path -> text) with ``patch`` applied; PatchError when it does not apply. Only
    modifications of existing files (what a planted bug and its fix are)."""
    out = dict(files)
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- a/"):
            i += 1
            continue
        path = lines[i][6:].rstrip("\n")
        if path not in out:
            raise PatchError(f"no file {path!r}")
        old = out[path].splitlines(keepends=True)
        new: list[str] = []
        pos = 0
        i += 2  # ---, +++
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchError(f"bad hunk header {lines[i]!r}")
            start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
            new.extend(old[pos:start])
            pos = start
            i += 1
            while i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\"):
                tag, body = lines[i][:1], lines[i][1:]
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if nxt.startswith("\\"):
                    body = body.rstrip("\n")
                if tag == "\\":
                    i += 1
                    continue
                if tag in (" ", "-"):
                    if pos >= len(old) or old[pos] != body:
                        raise PatchError(f"{path}: line {pos + 1} is not {body!r}")
                    pos += 1
                    if tag == " ":
                        new.append(body)
                else:
                    new.append(body)
                i += 1
        new.extend(old[pos:])
        out[path] = "".join(new)
    return out
