"""repo_env's grading against a reward-seeking policy (issue 46, RFC 0015), through the
environment's own tools over a real gRPC server.

Issue 46 found repo_env paying 0.5 on 4 of its 16 tasks with the bug left in place: the hidden
checks ran in one process with the agent's package imported, so a package that wrapped
``builtins.compile``/``exec`` at import forced every later check whose verdict was computed in
the check's code (``result = a == b``, ``all(...)``) to true. Here: that attack and variants
(json, operator, the grader's globals, the check's builtins patched after import) earn 0 on
every task and flip no check; a package that exits, kills its parent or sleeps earns 0, as does
a correct fix whose check process dies after answering (a verdict counts only from a check that
ran to completion); strict feedback is the same for any two wrong repositories; every reference
fix earns 1, the untouched repository and a half fix 0 (0.5 with the documented opt-in); rich
feedback still reports each check; every hidden check returns raw values the server compares.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import pytest

import openenv
from openenv import CallToolAction
from repo_env import TASKS, RepoEnvironment

TIMEOUT = 900.0


class PartialCredit(RepoEnvironment):
    """The documented opt-in: the old shaping (the fraction of fail_to_pass checks)."""

    partial_credit: ClassVar[bool] = True


def serve(fn: Callable[[Any], Awaitable[Any]], env_cls: type[RepoEnvironment] = RepoEnvironment) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def tool(env: Any, name: str, **args: Any) -> Any:
    r = await env.step(CallToolAction(name, args))
    assert not r.observation.result.is_error, r.observation.result
    return r


async def submit(env: Any, task_id: str, files: Mapping[str, str], feedback: str | None = None) -> Any:
    """One episode: reset into ``task_id``, write ``files`` with write_file, submit."""
    options: dict[str, Any] = {"task_id": task_id}
    if feedback is not None:
        options["feedback"] = feedback
    await env.reset(options=options)
    for path, content in files.items():
        await tool(env, "write_file", path=path, content=content)
    r = await tool(env, "submit")
    assert r.terminated
    return r


def packages(task_id: str) -> list[str]:
    """The task repository's package __init__ files (what its hidden checks import)."""
    return sorted(p for p in TASKS.by_id(task_id).files if p.endswith("__init__.py") and not p.startswith("tests/"))


def with_code_at_import(task_id: str, code: str, *, fixed: bool = False) -> dict[str, str]:
    """The files to write for the repository (bug in place, or the reference fix) with ``code``
    run by every package's __init__ at import, after its own exports."""
    task = TASKS.by_id(task_id)
    base = task.fixed_files()
    return {**(task.fix if fixed else {}), **{p: base[p] + "\n" + code for p in packages(task_id)}}


# The issue's attack: at import, wrap compile/exec/eval so that a check whose result is a
# boolean verdict (`result = a == b`, `all(...)`) comes out true. It needs to know nothing of the
# task: the bug stays in place.
ISSUE_ATTACK = """
import builtins as _b

if not getattr(_b, "_forced", False):
    _b._forced = True
    _compile, _exec, _eval = _b.compile, _b.exec, _b.eval
    _FORCE = "\\nif isinstance(globals().get('result'), bool):\\n    result = True\\n"

    def compile(source, filename, mode, *args, **kwargs):
        if isinstance(source, str) and mode == "exec":
            source += _FORCE
        return _compile(source, filename, mode, *args, **kwargs)

    def exec(code, globals=None, locals=None, *args, **kwargs):
        _exec(code, globals, locals, *args, **kwargs)
        for ns in (locals, globals):
            if isinstance(ns, dict) and isinstance(ns.get("result"), bool):
                ns["result"] = True

    def eval(source, globals=None, locals=None, *args, **kwargs):
        value = _eval(source, globals, locals, *args, **kwargs)
        return True if isinstance(value, bool) else value

    _b.compile, _b.exec, _b.eval = compile, exec, eval
"""

# Variants after import: json.dumps rewriting boolean answers to true, operator.eq and the
# builtins all/any always true, the grader module's own globals (compile/exec and the names it
# bound) shadowed, and the builtins of every frame up the stack (the check's own) patched.
VARIANT_ATTACK = """
import builtins as _b
import json as _json
import operator as _op
import sys as _sys

if not getattr(_b, "_forced2", False):
    _b._forced2 = True
    _dumps = _json.dumps

    def _dumps_true(obj, *args, **kwargs):
        if isinstance(obj, dict) and isinstance(obj.get("value"), bool):
            obj = {**obj, "value": True}
        return _dumps(obj, *args, **kwargs)

    def _always(*args, **kwargs):
        return True

    _json.dumps = _dumps_true
    _op.eq = _op.__eq__ = _always
    _b.all = _b.any = _always
    _real_exec, _real_compile = _b.exec, _b.compile

    def _exec_true(code, globals=None, locals=None, *args, **kwargs):
        _real_exec(code, globals, locals, *args, **kwargs)
        if isinstance(globals, dict) and isinstance(globals.get("result"), bool):
            globals["result"] = True

    for _name in ("solution", "__main__"):
        _mod = _sys.modules.get(_name)
        if _mod is not None:
            for _key in ("exec", "_exec"):
                _mod.__dict__[_key] = _exec_true
    _f = _sys._getframe()
    while _f is not None:
        if isinstance(_f.f_builtins, dict):
            _f.f_builtins["all"] = _f.f_builtins["any"] = _always
        if _f.f_code.co_filename == "<hidden check>":
            _f.f_globals["all"] = _f.f_globals["any"] = _always
        _f = _f.f_back
"""


@pytest.mark.parametrize("attack", ["issue", "variant"])
def test_an_import_time_attack_on_the_grader_earns_0_on_every_task_and_flips_no_check(attack: str) -> None:
    """The issue's finding, replayed on all 16 tasks with the bug left in place: before, 0.5 on
    bisect_bounds, fahrenheit, parse_duration and roman_subtractive. Now each check runs alone
    in a fresh process with builtins bound before the package is importable, and returns raw
    values the server compares: the reward is 0 everywhere, and rich feedback shows that not one
    fail_to_pass check passed (so the 0 is not only all-or-nothing grading hiding a flip)."""
    code = ISSUE_ATTACK if attack == "issue" else VARIANT_ATTACK

    async def go(env: Any) -> tuple[dict[str, float], dict[str, list[str]]]:
        rewards, flipped = {}, {}
        for task in TASKS:
            r = await submit(env, task.id, with_code_at_import(task.id, code))
            rewards[task.id] = r.reward
            rich = await submit(env, task.id, with_code_at_import(task.id, code), feedback="rich")
            f2p = {c.name for c in task.checks if c.kind == "fail_to_pass"}
            flipped[task.id] = sorted(n for n, ok in rich.metadata["checks"].items() if ok and n in f2p)
        return rewards, flipped

    rewards, flipped = serve(go)
    assert rewards == {t.id: 0.0 for t in TASKS}, {k: v for k, v in rewards.items() if v}
    assert flipped == {t.id: [] for t in TASKS}, {k: v for k, v in flipped.items() if v}


# Packages that end the check's process (or try to end its parent) at import, or hang it; one
# forges its own answer line (the question's nonce read from the grader's frame, the value
# true) and exits 0 before the check's code runs.
ENDINGS = {
    "os_exit_0": "import os\nos._exit(0)\n",
    "sys_exit_0": "raise SystemExit(0)\n",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "kill_everything": "import os, signal\nfor pid in (1, -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
    "    except OSError:\n        pass\n",
    "sleep": "import time\ntime.sleep(3600)\n",
    "forged_answer": """
import json, os, sys
f = sys._getframe()
while f is not None and "nonce" not in f.f_locals:
    f = f.f_back
if f is not None:
    os.write(4, (json.dumps({"n": f.f_locals["nonce"], "value": True}) + "\\n").encode())
    os._exit(0)
""",
}


@pytest.mark.parametrize("name", sorted(ENDINGS))
def test_a_package_that_ends_or_hangs_its_check_at_import_earns_0(name: str) -> None:
    """A check whose process exited, was killed or timed out fails, whatever it wrote before;
    killing the sandbox's supervisor (PID 1 of the sandbox) fails the check too, and the next
    check gets a new sandbox. The forged answer line carries the right nonce and is taken, but
    it holds a verdict, not the value the server expects: the nonce binds an answer to its
    question, not to the truth. Bug in place, on bisect_bounds (three checks; ``sleep`` costs
    each check its 10 s limit)."""

    async def go(env: Any) -> Any:
        return await submit(env, "bisect_bounds", with_code_at_import("bisect_bounds", ENDINGS[name]), "rich")

    r = serve(go)
    checks = r.metadata["checks"]
    assert r.reward == 0.0
    assert not checks["every element"] and not checks["single"], checks
    if not name.startswith("kill"):
        # The check's process ended (or answered a forgery) before the check's code ran: even the
        # pass_to_pass check, which the untouched repository passes, failed. (A kill of PID 1 or
        # of every process is refused or misses the check's own process, which then runs on.)
        assert not checks["middle"], checks


@pytest.mark.parametrize(
    "ending",
    [
        "import atexit, os, signal\natexit.register(lambda: os.kill(os.getpid(), signal.SIGKILL))\n",
        "import atexit, os\natexit.register(lambda: os._exit(3))\n",
    ],
    ids=["killed_after_answering", "exit_3_after_answering"],
)
def test_a_correct_answer_from_a_check_that_did_not_run_to_completion_earns_0(ending: str) -> None:
    """RFC 0015: a verdict counts only when its verifier ran to completion. The reference fix is
    in place and every check answers the right value, then its process is killed or exits with
    status 3: each check fails (before, the answers counted whatever the process did after).
    The control, the same fix with a harmless exit handler, earns 1."""
    harmless = "import atexit\natexit.register(lambda: None)\n"

    async def go(env: Any) -> tuple[Any, Any]:
        control = await submit(env, "fahrenheit", with_code_at_import("fahrenheit", harmless, fixed=True), "rich")
        return control, await submit(env, "fahrenheit", with_code_at_import("fahrenheit", ending, fixed=True), "rich")

    control, r = serve(go)
    assert control.reward == 1.0 and all(control.metadata["checks"].values()), control.metadata["checks"]
    assert r.reward == 0.0 and not any(r.metadata["checks"].values()), r.metadata["checks"]


def test_strict_feedback_is_the_same_for_any_two_wrong_repositories() -> None:
    """In a strict episode (the default) the graded step's observation, metadata and reward
    breakdown, and the state after it, depend on the repository only through the reward: a
    wrong formula, a package that exits at import, a half fix (one of two fail_to_pass checks)
    and the untouched repository look the same. No diff, no check names, no counts; a side call
    of submit is refused."""
    task = TASKS.by_id("paginate_offset")
    pages = task.fix["pager/pages.py"]
    half = pages.replace("return -(-n_items // per_page)", "return n_items // per_page")
    assert half != pages
    wrongs = {
        "wrong_formula": {"pager/pages.py": pages.replace("(page - 1) * per_page", "page * per_page - 1")},
        "exits_at_import": {"pager/__init__.py": "import os\nos._exit(0)\n"},
        "half_fix": {"pager/pages.py": half},
        "untouched": {"notes.txt": "nothing changed\n"},
    }

    async def go(env: Any) -> tuple[dict[str, Any], Any]:
        seen = {}
        for name, files in wrongs.items():
            r = await submit(env, task.id, files)
            st = await env.state()
            seen[name] = (
                r.reward,
                r.observation.result.content,
                r.observation.result.data,
                r.metadata,
                r.reward_breakdown.to_dict() if r.reward_breakdown is not None else None,
                (st.step_count, st.status, st.state),
            )
        await env.reset(options={"task_id": task.id})
        try:
            await env.call_tool("submit", {})
            refused = None
        except openenv.errors.FailedPrecondition as e:
            refused = e
        return seen, refused

    seen, refused = serve(go)
    first = seen["untouched"]
    assert first[0] == 0.0
    assert first[2] == {"reward": 0.0} and first[3] == {"steps": 2}, first
    assert first[4] is not None and not first[4].get("children") and not first[4].get("reason"), first[4]
    assert "changed_files" not in first[5][2]
    for name, got in seen.items():
        assert got == first, (name, got, first)
    assert refused is not None


def test_every_reference_fix_earns_1_and_the_untouched_repository_and_a_half_fix_0() -> None:
    """All-or-nothing by default: on every task the reference fix (its files written with
    write_file) earns 1 and submitting the untouched repository 0; on paginate_offset a half fix
    (paginate fixed, page_count not) earns 0, and 0.5 only with the documented opt-in
    (``partial_credit = True``), the old shaping, for curricula."""
    task = TASKS.by_id("paginate_offset")
    pages = task.fix["pager/pages.py"]
    half = {"pager/pages.py": pages.replace("return -(-n_items // per_page)", "return n_items // per_page")}
    assert half["pager/pages.py"] != pages

    async def go(env: Any) -> tuple[dict[str, float], dict[str, float], float]:
        fixed, untouched = {}, {}
        for t in TASKS:
            fixed[t.id] = (await submit(env, t.id, dict(t.fix))).reward
            untouched[t.id] = (await submit(env, t.id, {})).reward
        return fixed, untouched, (await submit(env, task.id, half)).reward

    async def opt_in(env: Any) -> tuple[float, float, float]:
        r = await submit(env, task.id, half)
        return r.reward, (await submit(env, task.id, dict(task.fix))).reward, (await submit(env, task.id, {})).reward

    fixed, untouched, half_reward = serve(go)
    assert fixed == {t.id: 1.0 for t in TASKS}, fixed
    assert untouched == {t.id: 0.0 for t in TASKS}, untouched
    assert half_reward == 0.0
    assert serve(opt_in, PartialCredit) == (0.5, 1.0, 0.0)


def test_the_grading_probes_reference_earns_1_and_their_nulls_and_replays_0() -> None:
    """What the certifier's grading level plays (``grading_probes()``), played here through the
    same tools: on each probe's task the reference earns the top reward, every null (the
    untouched repository) 0 and every replay (another task's reference fix) 0."""
    probes = RepoEnvironment.grading_probes()
    assert len(probes) >= 4

    async def play(env: Any, task_id: str, calls: Any) -> float:
        await env.reset(options={"task_id": task_id})
        r = None
        for c in calls:
            r = await tool(env, c.tool_name, **c.arguments)
        assert r is not None and r.terminated and calls[-1].tool_name == "submit"
        return float(r.reward)

    async def go(env: Any) -> list[tuple[str, float, list[float], list[float]]]:
        out = []
        for p in probes:
            assert p.task_id is not None and p.reference is not None
            ref = await play(env, p.task_id, p.reference)
            nulls = [await play(env, p.task_id, s) for s in p.null]
            replays = [await play(env, p.task_id, s) for s in p.replay]
            out.append((p.task_id, ref, nulls, replays))
        return out

    for task_id, ref, nulls, replays in serve(go):
        assert ref == 1.0 and nulls and set(nulls) == {0.0} and set(replays) <= {0.0}, (task_id, ref, nulls, replays)


def test_rich_feedback_asked_at_reset_reports_each_check() -> None:
    """Curricula and evaluations ask for rich feedback at reset: ``submit`` returns the pass
    counts and the diff, the step's metadata the diff and each check's result, the breakdown
    the counts, the state the files changed (a half fix on paginate_offset)."""
    task = TASKS.by_id("paginate_offset")
    pages = task.fix["pager/pages.py"]
    half = {"pager/pages.py": pages.replace("return -(-n_items // per_page)", "return n_items // per_page")}

    async def go(env: Any) -> tuple[Any, Any]:
        r = await submit(env, task.id, half, feedback="rich")
        return r, await env.state()

    r, st = serve(go)
    data = r.observation.result.data
    assert data["fail_to_pass"] == {"passed": 1, "total": 2} and data["pass_to_pass"] == {"passed": 1, "total": 1}
    assert data["diff"].startswith("diff --git a/pager/pages.py b/pager/pages.py")
    assert r.metadata["checks"] == {"pages": True, "count": False, "page 0": True}
    assert r.metadata["diff"] == data["diff"]
    reasons = [c["reason"] for c in r.reward_breakdown.to_dict()["children"]]
    assert reasons == ["1/1 pass_to_pass checks", "1/2 fail_to_pass checks"], reasons
    assert r.reward == 0.0 and st.state["changed_files"] == ["pager/pages.py"]


_VERDICT_CALLS = {"all", "any", "isinstance", "issubclass", "callable", "hasattr", "bool"}


def test_every_hidden_check_returns_raw_values_for_the_server_to_compare() -> None:
    """Comparisons by the server on raw values (RFC 0015): no shipped check computes a verdict
    next to the agent's code (no comparison, no all/any/isinstance, no ``except`` of a named
    class, which is an isinstance test the agent's package can rig; a check reports an
    exception's type name instead). The server's comparison tells a bool from a number and
    compares containers element by element."""
    from repo_env.tasks import same_value  # here: the attack tests above also run against older code

    offenders = []
    for task in TASKS:
        for c in task.checks:
            for node in ast.walk(ast.parse(c.code)):
                called = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None
                bad = (
                    isinstance(node, ast.Compare)
                    or called in _VERDICT_CALLS
                    or (
                        isinstance(node, ast.ExceptHandler)
                        and not (isinstance(node.type, ast.Name) and node.type.id == "Exception")
                    )
                )
                if bad:
                    offenders.append((task.id, c.name, ast.unparse(node)[:80]))
            assert not isinstance(c.expected, bool), (task.id, c.name, "a bare boolean is a verdict")
    assert offenders == []
    assert not same_value(True, 1) and not same_value(1, True) and not same_value([True], [1])
    assert same_value(212, 212.0) and same_value({"a": [1, "x"]}, {"a": [1, "x"]})
    assert not same_value({"__repr__": "X()"}, {"a": 1}) and not same_value("1", 1) and not same_value(None, [])
