"""The factory's pytest plugin: records each test's outcome (and, when asked, which of the
package's functions it called), keeps only the selected tests.

Loaded with ``-p repo_env.factory.pytest_plugin``; driven by environment variables so that the
command line stays the package's own:

* ``REPO_FACTORY_OUT``: the JSON file it writes, ``{nodeid: {"outcome", "message"}}``;
  ``outcome`` is ``passed``, ``failed`` (the test's call failed), ``error`` (its setup or
  teardown failed) or ``skipped``; ``message`` the failure's one-line summary (pytest's
  ``reprcrash``: the exception and its message, never the traceback's source lines).
* ``REPO_FACTORY_SELECT``: a file of node ids, one a line: every other collected test is
  deselected.
* ``REPO_FACTORY_TRACE``: a directory; each test's call records the qualified names of the
  functions under it that ran (``sys.setprofile``, call events only), as
  ``{"calls": {nodeid: ["relpath::qualname", ...]}}`` in the output.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

_results: dict[str, dict[str, str]] = {}
_calls: dict[str, list[str]] = {}
_TRACE = os.environ.get("REPO_FACTORY_TRACE")
_TRACE_ROOT = os.path.realpath(_TRACE) + os.sep if _TRACE else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get("REPO_FACTORY_SELECT")
    if not path:
        return
    with open(path, encoding="utf-8") as f:
        wanted = {line.rstrip("\n") for line in f if line.strip()}
    keep = [i for i in items if i.nodeid in wanted]
    drop = [i for i in items if i.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if not _TRACE:
        yield
        return
    seen: set[Any] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        names = set()
        for code in seen:
            fn = os.path.realpath(code.co_filename)
            if fn.startswith(_TRACE_ROOT):
                names.add(f"{os.path.relpath(fn, _TRACE)}::{_function_of(code.co_qualname)}")
        _calls[item.nodeid] = sorted(names)


def _function_of(qualname: str) -> str:
    """The def a code object belongs to: a lambda's or a comprehension's is its enclosing def's."""
    parts = qualname.split(".")
    while parts and parts[-1].startswith("<") and parts[-1] != "<locals>":
        parts.pop()
        if parts and parts[-1] == "<locals>":
            parts.pop()
    return ".".join(parts)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    prior = _results.get(nodeid)
    if report.when == "call":
        outcome = report.outcome
    elif report.failed:
        outcome = "error"
    elif report.skipped:
        outcome = "skipped"
    else:
        if prior is None:
            _results[nodeid] = {"outcome": "passed", "message": ""}
        return
    if prior is not None and prior["outcome"] in ("failed", "error") and report.when == "teardown":
        return
    message = ""
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = str(getattr(crash, "message", "") or report.longreprtext.splitlines()[-1:] or "")
    _results[nodeid] = {"outcome": outcome, "message": message[:2000]}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("REPO_FACTORY_OUT")
    if not out:
        return
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"results": _results, "calls": _calls, "exitstatus": int(exitstatus)}, f)
