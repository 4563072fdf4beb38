"""The terminal environment: every task's solution scores 1 and the untouched workspace 0 (in
one sandbox), the shell session over a real gRPC server (what persists between commands and
what does not, exit codes, timeouts, truncated output), and an agent that tries to fool the
verifier (planted shims and modules that would pass if the verifier used them, links, processes
left behind, a script that forges results or kills its verifier, hunting for the checks)
scoring 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from terminal_env import TASKS, TerminalEnvironment

TIMEOUT = 240.0


def serve(fn: Callable[..., Awaitable[Any]], sessions: int = 1) -> Any:
    async def main() -> Any:
        async with openenv.Server(TerminalEnvironment, "127.0.0.1", 0) as srv:
            clients = [openenv.ToolEnvClient(srv.address) for _ in range(sessions)]
            for c in clients:
                await c.__aenter__()
            try:
                return await fn(*clients)
            finally:
                for c in clients:
                    await c.__aexit__(None, None, None)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def sh(env: Any, command: str, **kw: Any) -> dict[str, Any]:
    r = await env.step(CallToolAction("run", {"command": command, **kw}))
    assert not r.observation.result.is_error, r.observation.result
    return dict(r.observation.result.data)


def test_every_solution_scores_1_and_the_untouched_workspace_0() -> None:
    assert len(TASKS) >= 10 and set(TASKS.splits) == {"train", "test"}
    env = TerminalEnvironment()
    try:
        for task in TASKS:
            env.reset(options={"task_id": task.id})
            r = env.run(task.solution)
            assert r["exit_code"] == 0, (task.id, r)
            solved = env.verify()
            assert (solved.passed, solved.error) == (solved.total, None), (task.id, solved)
            env.reset(options={"task_id": task.id})
            untouched = env.verify()
            assert untouched.passed == 0, (task.id, untouched)
    finally:
        env.close()


def test_a_task_solved_over_grpc_is_rewarded_1_and_ends_the_episode() -> None:
    async def go(env: Any) -> Any:
        first = await env.reset(options={"task_id": "count_errors"})
        assert "logs/*.log" in first.observation.result.content[0]["text"]
        out = await sh(env, "grep -c ERROR logs/*.log")
        assert out["stdout"] == "logs/app1.log:2\nlogs/app2.log:2\nlogs/app3.log:0\n"
        assert out["exit_code"] == 0
        await sh(env, "cat logs/*.log | grep -c ERROR > error_count.txt")
        r = await env.step(CallToolAction("submit", {}))
        assert r.observation.result.data == {"passed": 1, "total": 1}
        assert r.reward == 1.0 and r.terminated
        assert r.metadata["checks"] == {"error_count.txt holds the count": True}
        wrong = await env.reset(options={"task_id": "count_errors"})
        assert wrong.metadata["task_id"] == "count_errors"
        await sh(env, "grep -l ERROR logs/*.log | wc -l > error_count.txt")  # files, not lines
        r = await env.step(CallToolAction("submit", {}))
        return r

    r = serve(go)
    assert r.reward == 0.0 and r.terminated


def test_the_shell_session_keeps_the_directory_and_exported_variables_only() -> None:
    async def go(env: Any) -> None:
        await env.reset(options={"task_id": "hello_file"})
        r = await sh(env, "mkdir -p a/b && cd a/b && export GREETING='hi there' && LOCAL=1 && alias ll=ls && pwd")
        assert r["stdout"] == "/workspace/a/b\n"
        r = await sh(env, 'pwd; echo "$GREETING|${LOCAL:-unset}"; type ll >/dev/null 2>&1 || echo no-alias')
        assert r["stdout"] == "/workspace/a/b\nhi there|unset\nno-alias\n"
        # exit codes, `exit` included (the directory still saved)
        r = await sh(env, "cd /workspace && false")
        assert r["exit_code"] == 1
        r = await sh(env, "pwd; exit 7")
        assert (r["stdout"], r["exit_code"]) == ("/workspace\n", 7)
        r = await sh(env, "ls /nonexistent")
        assert r["exit_code"] == 2 and "No such file" in r["stderr"]
        # a background process ends with its command; a file it wrote before stays
        # (the command waits for the first write: a loaded machine may not have run it yet)
        r = await sh(
            env,
            "(echo started > bg.txt; sleep 30; echo late > bg.txt) & "
            "until [ -s bg.txt ]; do sleep 0.01; done; echo launched",
        )
        assert r["stdout"] == "launched\n" and r["exit_code"] == 0
        r = await sh(env, "cat bg.txt; ps -eo args | grep -c '[s]leep 30'")
        assert r["stdout"] == "started\n0\n"
        # stdin is empty: a command reading it gets end of file at once
        r = await sh(env, 'read -r line; echo "rc=$? [$line]"')
        assert r["stdout"] == "rc=1 []\n"
        # a timeout: killed whole, exit code 124, the directory change lost, its files kept
        r = await sh(env, "cd a && touch made.txt && sleep 30", timeout_s=2)
        assert (r["exit_code"], r["timed_out"]) == (124, True)
        assert "timed out after 2 s" in r["stderr"]
        r = await sh(env, "pwd; ls a")
        assert r["stdout"] == "/workspace\nb\nmade.txt\n"
        # output is cut at 16 KiB per stream, and says so
        r = await sh(env, "head -c 100000 /dev/zero | tr '\\0' x; echo done >&2")
        assert r["truncated"] and r["stdout"].endswith("[output truncated]")
        assert len(r["stdout"]) <= 16 * 1024 + 40 and "done\n" in r["stderr"]
        # run_python runs in /workspace and sees the shell's files
        p = await env.step(CallToolAction("run_python", {"code": "import os; print(sorted(os.listdir('a')))"}))
        assert p.observation.result.data["stdout"] == "['b', 'made.txt']\n"

    serve(go)


_FIZZ = (
    "def fizz(n):\n"
    "    return ''.join(('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else str(i))"
    " + '\\n' for i in range(1, n + 1))\n"
)

#: Files that would make the verifier pass fizzbuzz_script if it used them: Python modules it
#: might import (from the workspace), shells and tools on a PATH the agent exported, startup
#: files of bash. The real fizz.sh is missing.
SHIMS = {
    "subprocess.py": (
        "import sys\n" + _FIZZ + "class CompletedProcess:\n"
        "    def __init__(self, n):\n        self.returncode, self.stdout = 0, fizz(n).encode()\n"
        "class TimeoutExpired(Exception):\n    pass\n"
        "PIPE = DEVNULL = -1\n"
        "def run(argv, **kw):\n    return CompletedProcess(int(argv[-1].split()[-1]))\n"
    ),
    "os.py": "raise SystemExit(0)\n",
    "stat.py": "raise SystemExit(0)\n",
    "sitecustomize.py": "import builtins\nbuiltins.PWNED = True\n",
    "bin/bash": (
        '#!/bin/sh\nn=${3##* }\nseq 1 "$n" | '
        'awk \'{print ($1%15==0)?"FizzBuzz":($1%3==0)?"Fizz":($1%5==0)?"Buzz":$1}\'\n'
    ),
    ".bashrc": "fizz() { :; }\n",
    ".profile": "fizz() { :; }\n",
}


def _plant(files: dict[str, str]) -> str:
    parts = ["mkdir -p bin"]
    for path, text in files.items():
        parts.append(f"cat > {path} <<'SHIM_EOF'\n{text}SHIM_EOF")
    parts.append("chmod +x bin/* && cp bin/bash bin/sh")
    return "\n".join(parts)


async def _submit_reward(env: Any) -> float:
    r = await env.step(CallToolAction("submit", {}))
    assert not r.observation.result.is_error and r.terminated
    return float(r.reward or 0.0)


ATTACKS: dict[str, tuple[str, list[str]]] = {
    # modules and shells planted in the workspace, PATH and BASH_ENV exported to them
    "shims": (
        "fizzbuzz_script",
        [_plant(SHIMS), "export PATH=/workspace/bin:$PATH BASH_ENV=/workspace/.bashrc ENV=/workspace/.profile"],
    ),
    # a fizz.sh that forges answers on every fd, then kills its verifier and everything else
    "forge_and_kill": (
        "fizzbuzz_script",
        [
            "cat > fizz.sh <<'EOF'\n#!/bin/bash\nfor fd in $(seq 0 255); do "
            'echo \'{"n": "0", "value": [0, "x"]}\' >&$fd 2>/dev/null; done\n'
            "kill -9 $PPID 2>/dev/null; kill -9 -1 2>/dev/null; exit 0\nEOF\nchmod +x fizz.sh"
        ],
    ),
    # links: to a right answer elsewhere, to the verifier's own files in /proc
    "links": (
        "hello_file",
        ["mkdir d && echo 'hello, terminal' > d/real && ln -s d/real greeting.txt && ln -s /proc/self/fd/0 x"],
    ),
    # a process meant to write the answer after the submit (it ends with its command)
    "late_writer": ("hello_file", ["(sleep 3; echo 'hello, terminal' > greeting.txt) & disown; nohup sleep 60 &"]),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_agent_that_tries_to_fool_the_verifier_scores_0(name: str) -> None:
    task_id, commands = ATTACKS[name]

    async def go(env: Any) -> float:
        await env.reset(options={"task_id": task_id})
        for c in commands:
            r = await sh(env, c)
            assert r["exit_code"] == 0, r
        reward = await _submit_reward(env)
        # the server and a fresh episode are fine, and nothing of the attack is left
        await env.reset(options={"task_id": task_id})
        left = await sh(env, "ls -A")
        assert set(left["stdout"].split()) <= {"README"}, left
        return reward

    assert serve(go) == 0.0


def test_the_same_shims_do_not_spoil_an_honest_solution() -> None:
    task = TASKS.by_id("fizzbuzz_script")

    async def go(env: Any) -> float:
        await env.reset(options={"task_id": task.id})
        await sh(env, _plant(SHIMS))
        await sh(env, task.solution)
        return await _submit_reward(env)

    assert serve(go) == 1.0


def test_the_checks_and_solutions_are_out_of_reach() -> None:
    task = TASKS.by_id("count_errors")
    secrets = [task.checks[0].name, "HELPERS = {", task.solution]

    async def go(env: Any) -> str:
        await env.reset(options={"task_id": task.id})
        # every name on the file system; the text of every file outside the system's /usr
        r = await sh(
            env,
            "echo 'HELPERS = {' > control.txt; "
            "find / \\( -path /proc -o -path /sys \\) -prune -o -name '*terminal_env*' -print 2>/dev/null; "
            "grep -rIlF -e 'error_count.txt holds' -e 'HELPERS = {' --exclude-dir=proc --exclude-dir=sys "
            "--exclude-dir=usr / 2>/dev/null; echo end",
            timeout_s=60,
        )
        return str(r["stdout"])

    out = serve(go)
    # the search works (it finds the control, also where the workspace is mounted from) and finds nothing else
    assert set(out.split()) == {"/workspace/control.txt", "/box/work/control.txt", "end"}, out
    assert not any(s in out for s in secrets)
