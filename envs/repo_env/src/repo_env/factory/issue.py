"""Issue texts written from the failing behaviour, never from the patch: which tests fail, the
test's own code (its inputs) and what it observed against what it expected (pytest's one-line
failure summary). The planted code is never quoted: :func:`leaks_patch` rejects a text that
holds a line the bug changed."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["issue_text", "leaks_patch", "test_source"]

MAX_TESTS_SHOWN = 3
MAX_SOURCE_LINES = 25
MAX_MESSAGE_CHARS = 600

_OPENINGS = (
    "After upgrading, `{test}` fails.",
    "`{test}` fails on the current code.",
    "A regression: the test `{test}` no longer passes.",
    "Running the test suite, `{test}` fails.",
)


def test_source(tree: Path, nodeid: str) -> str:
    """The source of the test a node id names (its function, or its method in a class), at most
    :data:`MAX_SOURCE_LINES` lines; "" when it cannot be found."""
    parts = nodeid.split("::")
    path = tree / parts[0]
    names = [p.split("[", 1)[0] for p in parts[1:]]
    try:
        text = path.read_text(encoding="utf-8")
        node: ast.AST = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return ""
    for name in names:
        body = getattr(node, "body", [])
        found = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.name == name), None)  # fmt: skip
        if found is None:
            return ""
        node = found
    seg = ast.get_source_segment(text, node, padded=True) or ""
    lines = seg.splitlines()
    if len(lines) > MAX_SOURCE_LINES:
        lines = [*lines[:MAX_SOURCE_LINES], "    ..."]
    return "\n".join(lines)


def issue_text(instance_id: str, tree: Path, fail_to_pass: Sequence[str], messages: Mapping[str, str]) -> str:
    """The issue of an instance: the first failing test named with its code and its failure,
    up to :data:`MAX_TESTS_SHOWN` failing tests listed, how many fail in all."""
    first = fail_to_pass[0]
    pick = int(hashlib.sha256(instance_id.encode()).hexdigest(), 16)
    parts = [_OPENINGS[pick % len(_OPENINGS)].format(test=first)]
    src = test_source(tree, first)
    if src:
        parts.append(f"The test:\n\n```python\n{src}\n```")
    msg = (messages.get(first) or "").strip()
    if msg:
        if len(msg) > MAX_MESSAGE_CHARS:
            msg = msg[:MAX_MESSAGE_CHARS] + " ..."
        parts.append(f"It fails with (observed against expected):\n\n```\n{msg}\n```")
    others = [t for t in fail_to_pass[1:]]
    if others:
        shown = others[: MAX_TESTS_SHOWN - 1]
        more = f" and {len(others) - len(shown)} more" if len(others) > len(shown) else ""
        parts.append("Also failing: " + ", ".join(f"`{t}`" for t in shown) + more + ".")
    parts.append(
        "Fix the package so that these tests pass without breaking the others. The tests are right: "
        "hidden copies of them grade the fix."
    )
    return "\n\n".join(parts)


def leaks_patch(text: str, bug_patch: str) -> bool:
    """Whether the text holds a line the bug added (its planted code), stripped, of at least 12
    characters."""
    for line in bug_patch.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            code = line[1:].strip()
            if len(code) >= 12 and code in text:
                return True
    return False
