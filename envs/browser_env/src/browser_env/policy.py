"""A scripted policy for a few MiniWoB++ tasks: it reads the goal and the accessibility tree
the way an agent would, and answers one BrowserGym action string.

For tests, demos and ``openenv play``-style smoke runs; it knows nothing the observation does
not show. Tasks it plays: ``click-test``, ``click-button``, ``enter-text``, ``enter-password``,
``focus-text``, ``focus-text-2``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PLAYS", "Node", "act", "nodes"]

PLAYS = (
    "click-test",
    "click-button",
    "enter-text",
    "enter-password",
    "focus-text",
    "focus-text-2",
)
"""The tasks :func:`act` knows how to solve."""

_NODE = re.compile(r"^\s*\[(?P<bid>[a-zA-Z0-9]+)\] (?P<role>\w+) '(?P<name>(?:[^'\\]|\\.)*)'")


@dataclass(frozen=True)
class Node:
    """An element of the flattened accessibility tree that an action can name."""

    bid: str
    role: str
    name: str


def nodes(axtree: str) -> list[Node]:
    """The elements with a bid, in the tree's order."""
    out = []
    for line in axtree.splitlines():
        m = _NODE.match(line)
        if m:
            out.append(Node(m["bid"], m["role"], m["name"].replace("\\'", "'")))
    return out


def _quoted(goal: str) -> str:
    m = re.search(r'"([^"]*)"', goal)
    if m is None:
        raise ValueError(f"no quoted text in the goal {goal!r}")
    return m[1]


def _first(found: list[Node], role: str, name: str | None = None) -> Node:
    for n in found:
        if n.role == role and (name is None or n.name == name):
            return n
    raise ValueError(f"no {role}{'' if name is None else f' {name!r}'} in the accessibility tree")


def act(task: str, goal: str, axtree: str) -> str:
    """The next action for ``task`` given the observation's goal and accessibility tree."""
    found = nodes(axtree)
    if task == "click-test":
        return f"click('{_first(found, 'button').bid}')"
    if task == "click-button":  # 'Click on the "submit" button.'
        return f"click('{_first(found, 'button', _quoted(goal)).bid}')"
    if task in ("enter-text", "enter-password"):  # 'Enter "Cheree" into the text field and press Submit.'
        text = _quoted(goal)
        boxes = [n for n in found if n.role == "textbox"]
        if not boxes:
            raise ValueError("no textbox in the accessibility tree")
        fills = "\n".join(f"fill('{b.bid}', {text!r})" for b in boxes)
        return f"{fills}\nclick('{_first(found, 'button', 'Submit').bid}')"
    if task in ("focus-text", "focus-text-2"):  # 'Focus into the text input.' / '... 2nd input'
        boxes = [n for n in found if n.role == "textbox"]
        m = re.search(r"(\d+)(st|nd|rd|th)", goal)
        box = boxes[int(m[1]) - 1] if m else boxes[0]
        return f"click('{box.bid}')"
    raise ValueError(f"the scripted policy does not play {task!r} (it plays {', '.join(PLAYS)})")
