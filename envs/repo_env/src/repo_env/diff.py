"""A unified diff between two versions of a repository, in git's format (``git apply`` takes it)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

__all__ = ["git_diff"]

_NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _hunks(a: str, b: str, path: str) -> str:
    out = []
    for line in list(difflib.unified_diff(_lines(a), _lines(b), n=3, lineterm="\n"))[2:]:
        out.append(line if line.endswith("\n") else line + "\n" + _NO_NEWLINE)
    return "".join(out)


def git_diff(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """The changes from ``old`` to ``new`` (path -> text), file by file in path order."""
    parts = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        head = f"diff --git a/{path} b/{path}\n"
        if a is None:
            assert b is not None
            head += "new file mode 100644\n"
            parts.append(head + (f"--- /dev/null\n+++ b/{path}\n" + _hunks("", b, path) if b else ""))
        elif b is None:
            head += "deleted file mode 100644\n"
            parts.append(head + (f"--- a/{path}\n+++ /dev/null\n" + _hunks(a, "", path) if a else ""))
        else:
            parts.append(head + f"--- a/{path}\n+++ b/{path}\n" + _hunks(a, b, path))
    return "".join(parts)
