"""The repository environment: on every shipped task the reference fix scores 1 and the
untouched repository 0 (hidden checks, in one sandbox), the visible tests fail before and pass
after the fix, and the diff applies with git; the tools over a real gRPC server (the diff in
the step's metadata of a rich episode); and an agent that tries to pass without fixing (editing the visible
tests, a module that forges answers or reads the grader, planted modules, hunting for the hidden
checks, paths out of the repository) scoring 0.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from repo_env import TASKS, RepoEnvironment, git_diff

TIMEOUT = 240.0


def serve(fn: Callable[..., Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with openenv.Server(RepoEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def tool(env: Any, name: str, **args: Any) -> Any:
    r = await env.step(CallToolAction(name, args))
    assert not r.observation.result.is_error, r.observation.result
    return r


def _reward(v: Any) -> float:
    """The rubric's arithmetic on a verdict, all-or-nothing (the default): 1 when every hidden
    check passes, else 0."""
    p, pt = v.pass_to_pass
    f, ft = v.fail_to_pass
    return 1.0 if p == pt and f == ft else 0.0


def test_every_reference_fix_scores_1_and_the_untouched_repository_0(tmp_path: Path) -> None:
    assert len(TASKS) >= 15 and set(TASKS.splits) == {"train", "test"}
    env = RepoEnvironment()
    try:
        for task in TASKS:
            env.reset(options={"task_id": task.id})
            fixed = env.grade(task.fixed_files())
            assert fixed.error is None and _reward(fixed) == 1.0, (task.id, fixed)
            untouched = env.grade(task.files)
            assert _reward(untouched) == 0.0 and untouched.diff == "", (task.id, untouched)
            # every fail_to_pass check fails on the bug, every pass_to_pass one passes
            assert untouched.fail_to_pass[0] == 0 and untouched.pass_to_pass[0] == untouched.pass_to_pass[1], task.id
            # the visible tests show the bug and pass once it is fixed
            assert not env.run_tests()["passed"], task.id
            env.files = task.fixed_files()
            assert env.run_tests()["passed"], task.id
    finally:
        env.close()
    if shutil.which("git") is None:
        return
    for task in TASKS:  # the diff is git's: it applies to the task's repository
        d = tmp_path / task.id
        for path, text in task.files.items():
            (d / path).parent.mkdir(parents=True, exist_ok=True)
            (d / path).write_text(text)
        subprocess.run(["git", "init", "-q", str(d)], check=True)
        r = subprocess.run(
            ["git", "-C", str(d), "apply", "-"],
            input=git_diff(task.files, task.fixed_files()).encode(),
            capture_output=True,
        )
        assert r.returncode == 0, (task.id, r.stderr)
        assert {p: (d / p).read_text() for p in task.fixed_files()} == task.fixed_files()


def test_git_diff_handles_new_deleted_and_unterminated_files() -> None:
    old = {"a.py": "x = 1\ny = 2", "gone.txt": "bye\n", "empty": ""}
    new = {"a.py": "x = 1\ny = 3\n", "new/b.py": "print('hi')", "empty": ""}
    d = git_diff(old, new)
    assert "diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n" in d
    assert "diff --git a/new/b.py b/new/b.py\nnew file mode 100644\n--- /dev/null\n+++ b/new/b.py\n" in d
    assert "-y = 2\n\\ No newline at end of file\n+y = 3\n" in d
    assert "+print('hi')\n\\ No newline at end of file\n" in d and "empty" not in d


def test_the_tools_and_a_submission_over_grpc() -> None:
    task = TASKS.by_id("fahrenheit")

    async def go(env: Any) -> None:
        # rich feedback (asked at reset): submit's counts and the diff in its metadata
        first = await env.reset(options={"task_id": task.id, "feedback": "rich"})
        assert "celsius_to_fahrenheit" in first.observation.result.content[0]["text"]
        files = (await tool(env, "list_files")).observation.result.data
        assert files == {"result": sorted(task.files)} or files == sorted(task.files)
        text = (await tool(env, "read_file", path="units/temperature.py", start_line=4, end_line=5)).observation
        assert (
            text.result.content[0]["text"]
            == "    4\tdef celsius_to_fahrenheit(c):\n    5\t    return c * 5 / 9 + 32\n[lines 6-9 not shown]\n"
        )
        hits = (await tool(env, "search", text="5 / 9")).observation.result.content[0]["text"]
        assert "units/temperature.py:5:" in hits and "units/temperature.py:9:" in hits
        before = (await tool(env, "run_tests")).observation.result.data
        assert not before["passed"] and "FAILED" in before["stderr"]
        r = await env.step(CallToolAction("edit", {"path": "units/temperature.py", "old": "5 / 9", "new": "9 / 5"}))
        assert r.observation.result.is_error  # "5 / 9" occurs twice: refused, nothing changed
        await tool(env, "edit", path="units/temperature.py", old="c * 5 / 9 + 32", new="c * 9 / 5 + 32")
        after = (await tool(env, "run_tests")).observation.result.data
        assert after["passed"] and "OK" in after["stderr"]
        out = (await tool(env, "run_python", code="from units import *\nprint(celsius_to_fahrenheit(37))")).observation
        assert out.result.data["stdout"] == "98.6\n"
        diff = (await tool(env, "diff")).observation.result.content[0]["text"]
        assert "-    return c * 5 / 9 + 32\n+    return c * 9 / 5 + 32\n" in diff
        r = await tool(env, "submit")
        assert r.reward == 1.0 and r.terminated
        assert r.metadata["diff"] == diff and all(r.metadata["checks"].values())
        data = r.observation.result.data
        assert data["fail_to_pass"] == {"passed": 2, "total": 2} and data["diff"] == diff
        # a wrong fix: a regression (fahrenheit_to_celsius broken) scores 0 whatever else passes
        await env.reset(options={"task_id": task.id})
        await tool(
            env,
            "write_file",
            path="units/temperature.py",
            content=_FAKE.replace("c * 5 / 9 + 32", "c * 9 / 5 + 32").replace("(f - 32) * 5 / 9", "f"),
        )
        r = await tool(env, "submit")
        assert r.reward == 0.0 and r.terminated

    serve(go)


@pytest.mark.parametrize("path", ["../x.py", "/etc/passwd", "/workspace/../etc/passwd", "a/../../b", "", "."])
def test_paths_out_of_the_repository_are_refused(path: str) -> None:
    env = RepoEnvironment(task_id="fahrenheit")
    try:
        for call in (
            lambda: env.read_file(path),
            lambda: env.write_file(path, "x"),
            lambda: env.edit(path, "", "x"),
            # search("x", "") and search("x", "."): the whole repository
            *([lambda: env.search("x", path)] if path not in ("", ".") else []),
        ):
            with pytest.raises(ValueError):
                call()
    finally:
        env.close()


_FAKE = """\
def celsius_to_fahrenheit(c):
    return c * 5 / 9 + 32


def fahrenheit_to_celsius(f):
    return (f - 32) * 5 / 9
"""

#: Each replaces units/temperature.py (still wrong) and maybe adds files; none fixes the bug.
CHEATS: dict[str, dict[str, str]] = {
    # the visible tests made to pass
    "edit_visible_tests": {
        "tests/test_temperature.py": (
            "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"
        )
    },
    # forged answers on every fd at import, then the process ends "successfully"
    "forge_results": {
        "units/temperature.py": """\
import os
for fd in range(256):
    try:
        os.write(fd, b'{"loaded": true}\\n{"n": "x", "value": true}\\n')
    except OSError:
        pass
os._exit(0)
"""
    },
    # reads the grader's frames and every dict in the heap for expected values
    "read_the_grader": {
        "units/temperature.py": _FAKE
        + """\
import gc, sys
_seen = [o for o in gc.get_objects() if isinstance(o, dict) and "expected" in o]
f = sys._getframe()
while f:
    _seen.append(dict(f.f_locals))
    f = f.f_back


def celsius_to_fahrenheit(c):
    for s in _seen:
        if "expected" in s:
            return s["expected"]
    return 0
"""
    },
    # objects equal to anything
    "always_equal": {
        "units/temperature.py": """\
class Any(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def celsius_to_fahrenheit(c):
    return Any(0)


def fahrenheit_to_celsius(f):
    return (f - 32) * 5 / 9
"""
    },
    # modules planted to shadow what a grader might import, a sitecustomize, a conftest
    "planted_modules": {
        "json.py": 'def dumps(*a, **k):\n    return \'{"n": "0", "value": true}\'\n\n\nloads = dumps\n',
        "signal.py": "raise SystemExit(0)\n",
        "unittest.py": "raise SystemExit(0)\n",
        "sitecustomize.py": "import builtins\nbuiltins.result = True\n",
        "conftest.py": "raise SystemExit(0)\n",
    },
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_a_submission_that_cheats_scores_0(name: str) -> None:
    async def go(env: Any) -> Any:
        await env.reset(options={"task_id": "fahrenheit", "feedback": "rich"})  # rich: each check's result
        for path, content in CHEATS[name].items():
            await tool(env, "write_file", path=path, content=content)
        r = await tool(env, "submit")
        return r

    r = serve(go)
    assert r.reward == 0.0 and r.terminated
    assert not r.metadata["checks"]["points"] and not r.metadata["checks"]["inverse"]


def test_the_hidden_checks_and_fixes_are_out_of_reach() -> None:
    task = TASKS.by_id("fahrenheit")
    probe = (
        "import os\n"
        "open('control.txt', 'w').write('fail_to_pass')\n"
        "found = []\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    if root.startswith(('/proc', '/sys', '/usr')):\n"
        "        dirs[:] = []\n"
        "        continue\n"
        "    for name in dirs + files:\n"
        "        p = os.path.join(root, name)\n"
        "        if 'repo_env' in name or name == 'task.json':\n"
        "            found.append(p)\n"
        "        if name in files:\n"
        "            try:\n"
        "                if b'fail_to_pass' in open(p, 'rb').read(1 << 20):\n"
        "                    found.append(p)\n"
        "            except OSError:\n"
        "                pass\n"
        "print(sorted(found))\n"
    )

    async def go(env: Any) -> str:
        await env.reset(options={"task_id": task.id})
        r = await tool(env, "run_python", code=probe)
        return str(r.observation.result.data["stdout"])

    out = serve(go)
    # the search works (it finds its control, also where the workspace is mounted from), nothing else
    assert out == "['/box/work/control.txt', '/workspace/control.txt']\n", out
