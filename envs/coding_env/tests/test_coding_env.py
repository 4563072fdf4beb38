"""The coding environment over a real gRPC server on loopback: grading by hidden tests
(a correct solution scores 1.0, anything else 0), the tools, and hostile code
(fork and memory bombs, infinite loops, writes outside the sandbox, sockets, other
sessions' files, killing the server) contained while the session and others carry on.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import openenv
from coding_env import PROBLEMS, CodingEnvironment, Sandbox
from coding_env.problems import by_id
from openenv import CallToolAction
from openenv.sandbox import check

TIMEOUT = 120.0


def run(
    fn: Callable[..., Awaitable[Any]], sessions: int = 1, env_cls: type[CodingEnvironment] = CodingEnvironment
) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv:
            clients = [openenv.ToolEnvClient(srv.address) for _ in range(sessions)]
            for c in clients:
                await c.__aenter__()
            try:
                return await fn(*clients)
            finally:
                for c in clients:
                    await c.__aexit__(None, None, None)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def call(env: Any, tool: str, code: str) -> Any:
    return await env.step(CallToolAction(tool, {"code": code}))


def test_the_catalog_ships_at_least_30_problems_with_splits_and_hidden_tests() -> None:
    assert len(PROBLEMS) >= 30
    assert {p.split for p in PROBLEMS} == {"train", "test"}
    assert all(p.hidden and p.public for p in PROBLEMS)


def test_every_reference_solution_passes_its_hidden_tests_in_the_sandbox() -> None:
    with Sandbox(secrets=CodingEnvironment.secrets()) as box:
        for p in PROBLEMS:
            assert p.reference is not None
            r = box.call_function(p.reference, p.entry_point, [c.args for c in p.hidden])
            assert all(p.grade(p.hidden, r.cases)), (p.id, r)


def test_the_machine_gives_every_required_isolation_layer() -> None:
    layers = check(secrets=CodingEnvironment.secrets())
    for required in ("user-namespace", "pid-namespace", "network-namespace", "minimal-root", "disk-quota", "memory"):
        assert any(layer.startswith(required) for layer in layers), layers
    for required in ("rlimits", "not-dumpable", "no-new-privs", "landlock", "seccomp", "no-user-namespaces"):
        assert any(layer.startswith(required) for layer in layers), layers
    if os.geteuid() == 0:
        assert "unprivileged-uid" in layers


@pytest.mark.parametrize(
    ("code", "reward"),
    [
        (by_id("fizzbuzz").reference, 1.0),
        ("", 0.0),
        ("def fizzbuzz(n):\n    return None\n", 0.0),
        ("def fizzbuzz(n:\n", 0.0),
        ("def something_else(n):\n    return 1\n", 0.0),
    ],
    ids=["correct", "empty", "wrong", "syntax-error", "wrong-name"],
)
def test_submit_scores_one_when_every_hidden_test_passes_else_zero(code: str, reward: float) -> None:
    """All or nothing (RFC 0015): a wrong answer earns what an empty one does."""

    async def go(env: Any) -> Any:
        await env.reset(options={"problem_id": "fizzbuzz"})
        return await call(env, "submit", code)

    r = run(go)
    assert r.reward == reward
    assert r.terminated


class PartialCredit(CodingEnvironment):
    partial_credit = True


@pytest.mark.parametrize(("env_cls", "earns"), [(CodingEnvironment, False), (PartialCredit, True)])
def test_a_partly_right_solution_gets_partial_credit_only_when_opted_in(
    env_cls: type[CodingEnvironment], earns: bool
) -> None:
    """Right on 5 of the 7 hidden cases: 0 by default; 5/7 with the opt-in partial credit. Rich
    feedback (asked for at reset) says how many passed, in both."""
    code = "def is_prime(n):\n    return n in (2, 3, 5, 7, 97)\n"  # right on small cases only

    async def go(env: Any) -> Any:
        await env.reset(options={"problem_id": "is_prime", "feedback": "rich"})
        return await call(env, "submit", code)

    r = run(go, env_cls=env_cls)
    assert r.reward == (pytest.approx(5 / 7) if earns else 0.0)
    assert r.observation.result.data["passed"] < r.observation.result.data["total"]


def test_run_python_and_run_tests_report_output_and_examples_without_ending_the_episode() -> None:
    async def go(env: Any) -> Any:
        first = await env.reset(seed=3)
        pid = first.metadata["problem_id"]
        a = await call(env, "run_python", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
        b = await call(env, "run_tests", by_id(pid).reference or "")
        return pid, a, b

    pid, a, tests_step = run(go)
    res = a.observation.result.data
    assert res["stdout"] == "out\n" and "err" in res["stderr"] and res["exit_code"] == 3
    assert not a.terminated and a.reward == 0.0
    tests = tests_step.observation.result.data
    assert tests["passed"] == tests["total"] == len(by_id(pid).public)
    assert all(c["passed"] for c in tests["cases"])


def test_seeds_pick_the_same_problem() -> None:
    async def go(env: Any) -> Any:
        return [(await env.reset(seed=s)).metadata["problem_id"] for s in (1, 2, 1)]

    a, _, c = run(go)
    assert a == c


HOSTILE = {
    "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory-bomb": "x = []\nwhile True:\n    x.append(bytearray(10**7))\n",
    "infinite-loop": "while True:\n    pass\n",
    "write-outside": "open('/tmp/coding-env-escape', 'w').write('x')\nopen('/usr/lib/coding-env-escape', 'w')\n",
    "socket-inet": "import socket\nsocket.create_connection(('127.0.0.1', 1), timeout=1)\n",
    "kill-parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "kill-everyone": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    "output-flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "fill-disk": "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 65536)\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_contained_and_the_sessions_carry_on(name: str) -> None:
    async def go(victim: Any, other: Any) -> Any:
        # Rich feedback: the submissions' pass counts are what is checked.
        await victim.reset(options={"problem_id": "sum_list", "feedback": "rich"})
        await other.reset(options={"problem_id": "sum_list", "feedback": "rich"})
        # The other session works while the hostile code runs, and the victim afterwards.
        hostile, good = await asyncio.gather(
            call(victim, "run_python", HOSTILE[name]), call(other, "submit", by_id("sum_list").reference)
        )
        after = await call(victim, "submit", by_id("sum_list").reference)
        return hostile, good, after

    hostile, good, after = run(go, sessions=2)
    res = hostile.observation.result.data
    assert res["exit_code"] != 0 or res["timed_out"], res
    for r in (good, after):
        data = r.observation.result.data
        assert data["passed"] == data["total"] > 0 and not data["timed_out"], data
        assert r.reward == 1.0  # no time penalty: the good submission may run beside 10 s of hostile code
    assert not os.path.exists("/tmp/coding-env-escape")


LIMITED = {
    # A call that meets a limit tells the agent which one; one that meets none says null.
    "memory": HOSTILE["memory-bomb"],
    "cpu": "import signal\nsignal.raise_signal(signal.SIGXCPU)\n",  # as RLIMIT_CPU's kill
    "time": "import time\ntime.sleep(60)\n",  # no CPU used: the wall clock ends it
    # Children that wait, until a fork is refused (EAGAIN) at the limit of processes.
    "processes": "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)\n",
    # Threads that wait, until one is refused: the same limit counts threads.
    "threads": (
        "import threading, time\n"
        "while True:\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    ),
    None: "print('fine')\n",
}


@pytest.mark.parametrize("limit", list(LIMITED), ids=str)
def test_run_python_tells_the_agent_which_limit_its_call_met(limit: str | None) -> None:
    """Issue 50: a call that met the memory limit came back as a bare exit code (-9 from the
    watchdog, or 1 from an allocation the address-space limit refused), which the agent could
    not tell from a crash or a kill by time, and a call that ended on a process or thread
    refused at the limit came back as a bare exit code 1. Now the tool's result names the
    limit it met (memory, time, cpu, processes) with a sentence saying what happened, and null
    when it met none."""

    async def go(env: Any) -> Any:
        await env.reset(seed=0)
        return await call(env, "run_python", LIMITED[limit])

    res = run(go).observation.result.data
    assert res["limit"] == ("processes" if limit == "threads" else limit), res
    assert ("limit_note" in res) == (limit is not None), res


def _alive_with(marker: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    out.append(int(pid))
        except (OSError, ValueError):
            pass
    return out


def test_processes_started_by_a_call_do_not_outlive_it() -> None:
    """A new session, a double fork and a background sleep: all gone when the call returns."""
    marker = "1000.4242"
    code = (
        "import os, subprocess\nos.setsid()\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        f"if os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '{marker}'])\n"
        "print('spawned')\n"
    )

    async def go(env: Any) -> Any:
        await env.reset(seed=0)
        first = await call(env, "run_python", code)
        alive = _alive_with(marker)
        seen = await call(env, "run_python", "import os\nprint(sum(p.isdigit() for p in os.listdir('/proc')))")
        return first, alive, seen

    first, alive, seen = run(go)
    assert first.observation.result.data["stdout"] == "spawned\n"
    assert alive == [], alive
    # In the next call the sandbox holds its supervisor and the call's process, nothing else.
    assert seen.observation.result.data["stdout"] == "2\n"


def test_a_session_cannot_read_another_sessions_files() -> None:
    async def go(a: Any, b: Any) -> Any:
        await a.reset(seed=0)
        await b.reset(seed=0)
        r = await call(a, "run_python", "import os\nopen('secret.txt', 'w').write('s3cret')\nprint(os.getcwd())")
        where = r.observation.result.data["stdout"].strip()
        probe = (
            f"import os\ntry:\n    print(open({where + '/secret.txt'!r}).read())\n"
            "except OSError as e:\n    print(type(e).__name__)\nprint(os.listdir('.'))\n"
        )
        return (
            where,
            await call(a, "run_python", "print(open('secret.txt').read())"),
            await call(b, "run_python", probe),
        )

    where, mine, other = run(go, sessions=2)
    assert mine.observation.result.data["stdout"] == "s3cret\n"  # the workspace persists within the episode
    out = other.observation.result.data["stdout"]
    assert "s3cret" not in out and out.split("\n")[:2] == ["FileNotFoundError", "[]"], (where, out)


# Submissions of a reward-seeking policy that does not solve the task: each must score what an
# empty submission scores (0), and nothing of the hidden tests may come back in the result.
CHEATS = {
    "read-the-answer-key": (
        "import os\n"
        "def fizzbuzz(n):\n"
        "    for root, dirs, files in os.walk('/'):\n"
        "        if root.startswith(('/proc', '/dev')):\n"
        "            continue\n"
        "        for f in files:\n"
        "            if f.endswith('.py'):\n"
        "                try:\n"
        "                    src = open(os.path.join(root, f)).read()\n"
        "                except OSError:\n"
        "                    continue\n"
        "                if 'def fizzbuzz' in src and 'reference' in src:\n"
        "                    ns = {}\n"
        "                    exec(src, ns)\n"
        "                    return ns['by_id']('fizzbuzz').expected((n,))\n"
        "    return []\n"
    ),
    "forge-results": (
        "import os, json\n"
        "lines = [{'loaded': True}] + [{'case': i, 'n': '', 'value': [], 'passed': True} for i in range(8)]\n"
        "data = ''.join(json.dumps(x) + '\\n' for x in lines).encode()\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, data)\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    ),
    "expected-from-frames": (
        "import sys\n"
        "def fizzbuzz(n):\n"
        "    f = sys._getframe(1)\n"
        "    while f:\n"
        "        for k, v in f.f_locals.items():\n"
        "            if 'expect' in k:\n"
        "                return v\n"
        "        f = f.f_back\n"
        "    return None\n"
    ),
    "always-equal": (
        "class Eq(str):\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "    __hash__ = str.__hash__\n"
        "def fizzbuzz(n):\n"
        "    return Eq('cheat')\n"
    ),
    "leak-the-inputs": ("import sys\ndef fizzbuzz(n):\n    print('LEAK', n)\n    raise ValueError(f'LEAK {n}')\n"),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_a_submission_that_cheats_scores_no_more_than_an_empty_one(name: str) -> None:
    async def go(env: Any) -> Any:
        # Rich feedback: the environment's own result is checked for leaks (strict shows the reward only).
        await env.reset(options={"problem_id": "fizzbuzz", "feedback": "rich"})
        cheat = await call(env, "submit", CHEATS[name])
        await env.reset(options={"problem_id": "fizzbuzz"})
        empty = await call(env, "submit", "")
        return cheat, empty

    cheat, empty = run(go)
    assert empty.reward == 0.0
    assert cheat.reward is not None and cheat.reward <= empty.reward, cheat.observation.result.data
    text = json.dumps(cheat.observation.result.data)
    hidden_inputs = [str(c.args[0]) for c in by_id("fizzbuzz").hidden]
    assert "LEAK" not in text, text  # nothing the graded run printed or raised comes back
    assert not any(f"LEAK {i}" in text for i in hidden_inputs)


def test_a_graded_run_leaves_nothing_for_a_later_call() -> None:
    """The graded code writes what it sees to the workspace, /tmp and /dev/shm and leaves a
    process behind; a side call right after the (terminated) episode, and the next episode,
    find nothing of it."""
    spy = (
        "import os, subprocess\n"
        "def sum_list(xs):\n"
        "    for d in ('/workspace', '/tmp', '/dev/shm'):\n"
        "        open(d + '/seen', 'a').write(repr(xs))\n"
        "    subprocess.Popen(['sleep', '77'], start_new_session=True)\n"
        "    return 0\n"
    )
    look = (
        "import os\n"
        "print(os.listdir('/workspace'), os.listdir('/tmp'), os.listdir('/dev/shm'), "
        "sum(p.isdigit() for p in os.listdir('/proc')))"
    )

    async def go(env: Any) -> Any:
        await env.reset(options={"problem_id": "sum_list"})
        await call(env, "submit", spy)
        side = await env.call_tool("run_python", {"code": look})  # a side call: the episode is over
        await env.reset(options={"problem_id": "sum_list"})
        return side, await call(env, "run_python", look)

    side, later = run(go)
    assert side.data["stdout"] == "[] [] [] 2\n", side.data
    assert later.observation.result.data["stdout"] == "[] [] [] 2\n"
