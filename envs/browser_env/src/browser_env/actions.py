"""Which BrowserGym action strings the browser environment runs, and how.

An action is a BrowserGym high-level action string: one or more calls such as ``click('12')``,
``fill('5', 'hello')``, ``press('5', 'Enter')``, ``mouse_click(40, 60)``. BrowserGym's own
parser reads it (``strict``: the whole string must be calls with literal arguments, nothing in
between), and BrowserGym's own functions perform it.

What is refused, and why: the reward is MiniWoB++'s own checker, JavaScript in the page
(``WOB_RAW_REWARD_GLOBAL``), so an action must never run code of its choosing there. Anything
that is not a call of an allowed function with literal arguments (Python, ``page.evaluate``,
JavaScript) does not parse. Of BrowserGym's functions, only those that act as a user's mouse and
keyboard are allowed (:data:`ALLOWED`); refused are navigation (``goto`` could open a
``javascript:`` or ``file:`` URL, and leaving the task's page ends the episode anyway), tabs,
file uploads (they read the server's files), and chat/infeasibility messages (MiniWoB++ has no
chat). Arguments are bounded (:data:`MAX_TEXT`, :data:`MAX_WAIT_MS`, :data:`MAX_CALLS`) so that
one action cannot hold a browser for long.

A refused or unparsable action is reported in-band, as BrowserGym does: the step runs nothing,
its observation's ``last_action_error`` says why, and the episode goes on.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["ALLOWED", "MAX_CALLS", "MAX_TEXT", "MAX_WAIT_MS", "ActionRefused", "Program", "compile_action"]

ALLOWED = (
    "noop",
    # by element id (bid), as the accessibility tree shows it
    "click",
    "dblclick",
    "hover",
    "fill",
    "clear",
    "focus",
    "press",
    "select_option",
    "drag_and_drop",
    "scroll",
    # by coordinates and keys
    "scroll_at",
    "mouse_move",
    "mouse_up",
    "mouse_down",
    "mouse_click",
    "mouse_dblclick",
    "mouse_drag_and_drop",
    "keyboard_down",
    "keyboard_up",
    "keyboard_press",
    "keyboard_type",
    "keyboard_insert_text",
)
"""The BrowserGym action functions an action may call."""

REFUSED = {
    "goto": "navigation is refused: the task is its page",
    "go_back": "navigation is refused: the task is its page",
    "go_forward": "navigation is refused: the task is its page",
    "new_tab": "tabs are refused: the task is its page",
    "tab_close": "tabs are refused: the task is its page",
    "tab_focus": "tabs are refused: the task is its page",
    "upload_file": "file uploads are refused: they would read the server's files",
    "mouse_upload_file": "file uploads are refused: they would read the server's files",
    "send_msg_to_user": "MiniWoB++ tasks have no chat",
    "report_infeasible": "MiniWoB++ tasks are all feasible",
}

MAX_CALLS = 8
"""Most calls in one action string."""
MAX_TEXT = 1000
"""Longest string argument (text to type, a key, a bid)."""
MAX_WAIT_MS = 1000
"""Longest ``noop`` wait."""
MAX_ACTION_CHARS = 4096
"""Longest action string."""
ELEMENT_TIMEOUT_MS = 3000
"""How long an action waits for its element to be actionable. BrowserGym's functions wait 500 ms,
which fails valid actions on a loaded machine (a renderer starved of CPU for half a second); the
environment gives them this instead (the same functions, with the constant replaced)."""


class ActionRefused(ValueError):
    """An action string that is not run (unparsable, a refused function, an argument out of bounds)."""


@dataclass(frozen=True)
class Program:
    """A checked action: BrowserGym's Python code for it (allowed functions, literal arguments)."""

    calls: tuple[tuple[str, tuple[Any, ...]], ...]
    code: str


@functools.cache
def _action_set() -> Any:
    from browsergym.core.action import functions
    from browsergym.core.action.highlevel import HighLevelActionSet

    return HighLevelActionSet(
        subsets=["custom"],
        custom_actions=[getattr(functions, name) for name in ALLOWED],
        multiaction=True,
        strict=True,
        demo_mode="off",
    )


def _check_value(v: Any, where: str) -> None:
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, (int, float)):
        if not math.isfinite(v) or abs(v) > 1e6:
            raise ActionRefused(f"{where}: number {v!r} out of range")
        return
    if isinstance(v, str):
        if len(v) > MAX_TEXT:
            raise ActionRefused(f"{where}: text longer than {MAX_TEXT} characters")
        return
    if isinstance(v, (list, tuple)) and len(v) <= 16:
        for x in v:
            if not isinstance(x, str) or len(x) > 64:
                raise ActionRefused(f"{where}: lists may hold only short strings")
        return
    raise ActionRefused(f"{where}: argument of type {type(v).__name__} not allowed")


def compile_action(action: str) -> Program:
    """Parse and check an action string; raise :class:`ActionRefused` saying why it is not run."""
    from browsergym.core.action.parsers import NamedArgument, highlevel_action_parser

    if not isinstance(action, str) or not action.strip():
        raise ActionRefused("empty action: give a BrowserGym action such as click('12')")
    if len(action) > MAX_ACTION_CHARS:
        raise ActionRefused(f"action longer than {MAX_ACTION_CHARS} characters")
    try:
        parsed = highlevel_action_parser.parse_string(action, parse_all=True).as_list()
    except Exception as e:  # noqa: BLE001 - whatever the parser raises (ParseException, a literal's error), it is a refusal
        raise ActionRefused(
            f"not a BrowserGym action (calls of {', '.join(ALLOWED)} with literal arguments): {e}"
        ) from None
    if len(parsed) > MAX_CALLS:
        raise ActionRefused(f"{len(parsed)} calls in one action; at most {MAX_CALLS}")
    calls = []
    for name, args in parsed:
        if name in REFUSED:
            raise ActionRefused(f"{name}: {REFUSED[name]}")
        if name not in ALLOWED:
            raise ActionRefused(f"unknown action {name!r}; allowed: {', '.join(ALLOWED)}")
        for i, a in enumerate(args):
            if isinstance(a, NamedArgument):
                if not a.name.isidentifier():
                    raise ActionRefused(f"{name}: bad argument name {a.name!r}")
                _check_value(a.value, f"{name}({a.name}=...)")
            else:
                _check_value(a, f"{name} argument {i + 1}")
        if name == "noop":
            wait = next((a.value if isinstance(a, NamedArgument) else a for a in args), 1000)
            if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 <= wait <= MAX_WAIT_MS:
                raise ActionRefused(f"noop: wait_ms must be a number in 0..{MAX_WAIT_MS}")
        calls.append((name, tuple(args)))
    try:
        code = _action_set().to_python_code(action)
    except Exception as e:  # noqa: BLE001 - the same parser: should not happen after the checks above
        raise ActionRefused(f"{type(e).__name__}: {e}") from None
    return Program(tuple(calls), code)


@functools.cache
def _includes() -> tuple[int, Any]:
    """BrowserGym's function definitions (the prefix of every program), compiled once."""
    src = _action_set().python_includes
    if "timeout=500)" not in src:  # pragma: no cover - a BrowserGym that changed its functions
        raise RuntimeError("BrowserGym's action functions no longer wait timeout=500: review ELEMENT_TIMEOUT_MS")
    src = src.replace("timeout=500)", f"timeout={ELEMENT_TIMEOUT_MS})")
    return len(_action_set().python_includes), compile(src, "<browsergym actions>", "exec")


def run(program: Program, page: Any) -> None:
    """Perform a checked action on ``page`` with BrowserGym's functions (on the page's lane)."""
    n, includes = _includes()
    if not program.code.startswith(_action_set().python_includes):
        raise ActionRefused("internal: unexpected program")  # pragma: no cover
    calls = compile(program.code[n:], "<action>", "exec")

    def refuse(*_: Any) -> None:
        raise ActionRefused("MiniWoB++ tasks have no chat")

    scope: dict[str, Any] = {
        "page": page,
        "send_message_to_user": refuse,
        "report_infeasible_instructions": refuse,
        "DEMO_MODE": False,
    }
    exec(includes, scope)
    exec(calls, scope)
