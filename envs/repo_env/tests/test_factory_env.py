"""repo_env serving the factory's instances behind the grading boundary (issue 48, RFC 0015),
through the environment's own tools over a real gRPC server, on instances built from the
fixture package (conftest.py).

The reference fix earns 1 and the untouched repository 0; a policy that deletes, skips or
rewrites the tests, plants a ``conftest.py`` that reports every test passed, patches pytest from
the package at import, or makes the buggy function return a constant earns 0 on every sampled
instance; strict feedback is the reward alone.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from repo_env.factory.env import FactoryEnvironment, factory_tasks, graded_files, tampering
from repo_env.factory.instances import load_instances

pytestmark = pytest.mark.xdist_group("repo_factory")
TIMEOUT = 900.0


@pytest.fixture(scope="module")
def env_cls(factory_built: Any) -> type[FactoryEnvironment]:
    class Built(FactoryEnvironment):
        _tasks = factory_tasks(factory_built.out)

    return Built


def serve(env_cls: type[FactoryEnvironment], fn: Callable[[Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def play(env: Any, task_id: str, files: Mapping[str, str], feedback: str | None = None) -> Any:
    options: dict[str, Any] = {"task_id": task_id}
    if feedback:
        options["feedback"] = feedback
    await env.reset(options=options)
    for path, content in files.items():
        r = await env.step(CallToolAction("write_file", {"path": path, "content": content}))
        assert not r.observation.result.is_error, r.observation.result
    r = await env.step(CallToolAction("submit", {}))
    assert r.terminated and not r.observation.result.is_error, r.observation.result
    return r


def _sample(env_cls: type[FactoryEnvironment], n: int = 2) -> list[Any]:
    """n instances whose bug is a single one in a function returning a value (the constant
    policy replaces its body)."""
    insts = env_cls.tasks.instances  # type: ignore[attr-defined]
    return insts.sample(n, seed=1)


def _constant_body(text: str, function: str, constant: str) -> str:
    """``text`` with the def of ``function`` (a top-level name) returning ``constant`` at once."""
    name = function.split(".")[-1]
    m = re.search(rf"^(\s*)def {re.escape(name)}\(.*?\):\n", text, re.M | re.S)
    assert m, function
    indent = m.group(1) + "    "
    return text[: m.end()] + f"{indent}return {constant}\n" + text[m.end() :]


def attacks(task: Any) -> dict[str, dict[str, str]]:
    """The files a reward-seeking policy writes, by attack, for one task (bug in place)."""
    files, tests = task.files, sorted(p for p in task.files if p.startswith("tests/test_"))
    source = task.instance.files[0]
    out: dict[str, dict[str, str]] = {
        "delete the tests": {t: "" for t in tests},
        "rewrite the tests": {t: "def test_ok():\n    assert True\n" for t in tests},
        "skip the tests": {
            t: "import pytest\npytest.skip('later', allow_module_level=True)\n" + files[t] for t in tests
        },
        "a conftest reporting every test passed": {
            "conftest.py": (
                "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                "    outcome = yield\n    rep = outcome.get_result()\n    rep.outcome = 'passed'\n"
            ),
            "tests/conftest.py": "collect_ignore_glob = ['*']\n",
        },
        "the package patching pytest at import": {
            source: files[source] + "\nimport _pytest.reports as _r\n"
            "_r.TestReport.outcome = property(lambda self: 'passed', lambda self, v: None)\n"
        },
    }
    for const in ("None", "0", "''", "[]"):
        text = files[source]
        for fn in task.instance.functions:
            text = _constant_body(text, fn, const)
        out[f"return {const}"] = {source: text}
    return out


def test_the_reference_fix_earns_1_and_the_untouched_repository_0(env_cls: type[FactoryEnvironment]) -> None:
    """Over gRPC, on sampled instances: the reference fix written with write_file then submit
    earns 1; submitting the buggy repository earns 0; strict feedback says the reward alone."""
    sample = _sample(env_cls)

    async def go(env: Any) -> list[tuple[float, float, Any]]:
        out = []
        for inst in sample:
            task = env_cls.tasks.by_id(inst.id)
            ref = await play(env, inst.id, task.fix)
            null = await play(env, inst.id, {})
            out.append((ref.reward, null.reward, null.observation.result.data))
        return out

    for ref, null, data in serve(env_cls, go):
        assert (ref, null) == (1.0, 0.0)
        assert data == {"reward": 0}


def test_gaming_the_tests_earns_0_on_every_sampled_instance(env_cls: type[FactoryEnvironment]) -> None:
    """Deleting, rewriting or skipping the tests, a conftest.py that reports every test passed
    (or collects none), the package patching pytest's reports at import, and the buggy
    functions returning a constant: 0 each, on every sampled instance (one in the suite, every
    instance of the set with OPENENV_FACTORY_FULL=1); rich feedback shows the hidden
    fail_to_pass tests still failing."""
    sample = _sample(env_cls, 100 if os.environ.get("OPENENV_FACTORY_FULL") else 1)

    async def go(env: Any) -> dict[str, float]:
        rewards = {}
        for inst in sample:
            task = env_cls.tasks.by_id(inst.id)
            for name, files in attacks(task).items():
                r = await play(env, inst.id, files, feedback="rich")
                rewards[f"{inst.id}: {name}"] = r.reward
                assert r.observation.result.data["fail_to_pass"]["passed"] < len(inst.fail_to_pass) or r.reward == 0
        return rewards

    rewards = serve(env_cls, go)
    assert len(rewards) == len(sample) * 9
    assert rewards == dict.fromkeys(rewards, 0.0), {k: v for k, v in rewards.items() if v}


def test_only_the_packages_source_modules_are_graded(env_cls: type[FactoryEnvironment]) -> None:
    """What is graded is the pristine tree with the agent's changed source modules over it:
    test files, conftest.py and new files come from the pristine copy."""
    inst = _sample(env_cls, 1)[0]
    task = env_cls.tasks.by_id(inst.id)
    pristine = {**task.files, **task.fix}
    mine = {**task.files, "tests/test_core.py": "", "conftest.py": "x = 1\n", "tally/new.py": "y = 2\n"}
    graded, changed = graded_files(task.package, pristine, mine)
    assert graded == {**pristine, **{p: task.files[p] for p in task.fix}}
    assert set(changed) == set(task.fix)


def test_a_fix_reaching_for_the_test_machinery_is_found() -> None:
    """Names a fix of a planted bug never needs (pytest, builtins, frames, sys.modules,
    getattr, os._exit) flag a changed module; the same names already in the pristine module,
    or an honest fix, do not."""
    old = "import os\n\ndef f(x):\n    return x + 1\n"
    assert tampering({"m.py": old}, {"m.py": old.replace("x + 1", "x - 1")}) == []
    for evil in ("import _pytest", "import builtins", "import sys\nsys.modules", "getattr(f, '__globals__')",
                 "os._exit(0)", "exec('1')", "__import__('gc')"):  # fmt: skip
        assert tampering({"m.py": old}, {"m.py": old + evil + "\n"}), evil
    assert tampering({"m.py": old + "import sys\n"}, {"m.py": old + "import sys\n"}) == []


def test_the_factory_environment_lists_instances_by_split_and_tier(
    env_cls: type[FactoryEnvironment], factory_built: Any
) -> None:
    """list_tasks gives each split's instances with package and tier; reset by seed is stable
    and stays in the split asked for."""
    insts = load_instances(factory_built.out)
    for split in ("train", "validation", "test"):
        ids = [t.id for t in env_cls.list_tasks(split)]
        assert ids == [i.id for i in insts if i.split == split]
    env = env_cls()
    try:
        env.reset(seed=3)
        first = env.task.id
        env.reset(seed=3)
        assert env.task.id == first
        split = insts[0].split
        env.reset(seed=5, options={"split": split})
        assert env.task.split == split
    finally:
        env.close()
