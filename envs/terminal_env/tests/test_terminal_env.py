"""The terminal environment (every family's solution, untouched workspace and replayed answer:
test_task_families.py): the shell session over a real gRPC server (what persists between commands and
what does not, exit codes, timeouts, truncated output), and an agent that tries to fool the
verifier (planted shims and modules that would pass if the verifier used them, links, processes
left behind, a script that forges results or kills its verifier, hunting for the checks)
scoring 0.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from terminal_env import TASKS, Task, TerminalEnvironment

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


def test_a_task_solved_over_grpc_is_rewarded_1_and_ends_the_episode() -> None:
    """The whole loop over the wire, with rich feedback (which shows the per-check results);
    a wrong count on the same instance is rewarded 0."""
    task = TASKS.by_id("count_errors").instance(5)
    logs = sorted(p for p in task.files if p.count("/") == 1 and p.endswith(".log"))
    per_file = "".join(f"{p}:{sum('ERROR' in line for line in str(task.files[p]).splitlines())}\n" for p in logs)
    out_file = next(iter(task.answer))  # errors_<word>.txt: its name is drawn from the seed too
    count = int(task.answer[out_file])

    async def go(env: Any) -> Any:
        first = await env.reset(seed=5, options={"task_id": "count_errors", "feedback": "rich"})
        assert "logs/*.log" in first.observation.result.content[0]["text"]
        out = await sh(env, "grep -c ERROR logs/*.log")
        assert out["stdout"] == per_file
        assert out["exit_code"] == 0
        await sh(env, f"cat logs/*.log | grep -c ERROR > {out_file}")
        r = await env.step(CallToolAction("submit", {}))
        assert r.observation.result.data == {"passed": 1, "total": 1}
        assert r.reward == 1.0 and r.terminated
        assert r.metadata["checks"] == {f"{out_file} holds the count": True}
        wrong = await env.reset(seed=5, options={"task_id": "count_errors"})
        assert wrong.metadata["task_id"] == "count_errors"
        await sh(env, f"echo {count + 1} > {out_file}")  # one line too many
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


#: The instance the attacks below are played on (an episode reset with this seed).
SEED = 7
FIZZ = TASKS.by_id("fizzbuzz_script").instance(SEED)
HELLO = TASKS.by_id("hello_file").instance(SEED)


def _hidden_answers(task: Task) -> dict[str, list[Any]]:
    """fizzbuzz_script's checks as command line -> what it must print: the table an agent
    would need, and that a shim consulted by the verifier would answer from."""
    return {c.code.split("'")[1]: c.expected for c in task.checks}


def _shims(task: Task) -> dict[str, str]:
    """Files that would make the verifier pass ``task`` (fizzbuzz_script) if it used them:
    Python modules it might import (from the workspace), a shell on a PATH the agent exported,
    startup files of bash; the real script is missing."""
    table = {cmd: [rc, base64.b64encode(out.encode()).decode()] for cmd, (rc, out) in _hidden_answers(task).items()}
    cases = "".join(f"  {cmd!r}) printf %s {out} | base64 -d ;;\n" for cmd, (_, out) in table.items())
    return {
        "subprocess.py": (
            f"import base64\nTABLE = {table!r}\n"
            "class CompletedProcess:\n"
            "    def __init__(self, cmd):\n"
            "        rc, out = TABLE[cmd]\n"
            "        self.returncode, self.stdout = rc, base64.b64decode(out)\n"
            "class TimeoutExpired(Exception):\n    pass\n"
            "class SubprocessError(Exception):\n    pass\n"
            "PIPE = DEVNULL = -1\n"
            "def run(argv, **kw):\n    return CompletedProcess(argv[-1])\n"
        ),
        "os.py": "raise SystemExit(0)\n",
        "stat.py": "raise SystemExit(0)\n",
        "sitecustomize.py": "import builtins\nbuiltins.PWNED = True\n",
        "bin/bash": f'#!/bin/sh\nfor a; do last=$a; done\ncase "$last" in\n{cases}esac\n',  # bash ... -c COMMAND
        # read by a bash that honoured BASH_ENV or ENV: they write the real script first
        ".bashrc": task.solution + "\n",
        ".profile": task.solution + "\n",
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


_SCRIPT = FIZZ.checks[0].code.split("'")[1].split()[0]  # ./NAME.sh
_LINE = shlex.quote(HELLO.checks[0].expected.rstrip("\n"))
_NAME = next(iter(HELLO.answer))

ATTACKS: dict[str, tuple[Task, list[str]]] = {
    # modules and shells planted in the workspace, PATH and BASH_ENV exported to them
    "shims": (
        FIZZ,
        [_plant(_shims(FIZZ)), "export PATH=/workspace/bin:$PATH BASH_ENV=/workspace/.bashrc ENV=/workspace/.profile"],
    ),
    # a script that forges answers on every fd, then kills its verifier and everything else
    "forge_and_kill": (
        FIZZ,
        [
            f"cat > {_SCRIPT} <<'EOF'\n#!/bin/bash\nfor fd in $(seq 0 255); do "
            'echo \'{"n": "0", "value": [0, "x"]}\' >&$fd 2>/dev/null; done\n'
            f"kill -9 $PPID 2>/dev/null; kill -9 -1 2>/dev/null; exit 0\nEOF\nchmod +x {_SCRIPT}"
        ],
    ),
    # links: to a right answer elsewhere, to the verifier's own files in /proc
    "links": (
        HELLO,
        [f"mkdir d && printf '%s\\n' {_LINE} > d/real && ln -s d/real {_NAME} && ln -s /proc/self/fd/0 x"],
    ),
    # a process meant to write the answer after the submit (it ends with its command)
    "late_writer": (HELLO, [f"(sleep 3; printf '%s\\n' {_LINE} > {_NAME}) & disown; nohup sleep 60 &"]),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_agent_that_tries_to_fool_the_verifier_scores_0(name: str) -> None:
    """Each attack would pass the task if the verifier fell for it (the shims answer every
    hidden case; the link and the late writer hold the right line)."""
    task, commands = ATTACKS[name]

    async def go(env: Any) -> float:
        await env.reset(seed=SEED, options={"task_id": task.id})
        for c in commands:
            r = await sh(env, c)
            assert r["exit_code"] == 0, r
        reward = await _submit_reward(env)
        # the server and a fresh episode are fine, and nothing of the attack is left
        await env.reset(seed=SEED, options={"task_id": task.id})
        left = await sh(env, "ls -A")
        assert set(left["stdout"].split()) <= {"README"}, left
        return reward

    assert serve(go) == 0.0


def test_the_same_shims_do_not_spoil_an_honest_solution() -> None:
    """The shims are not what fails the attack above: with the real script beside them, 1."""

    async def go(env: Any) -> float:
        await env.reset(seed=SEED, options={"task_id": FIZZ.id})
        await sh(env, _plant(_shims(FIZZ)))
        await sh(env, FIZZ.solution)
        return await _submit_reward(env)

    assert serve(go) == 1.0


def test_the_checks_and_solutions_are_out_of_reach() -> None:
    task = TASKS.by_id("count_errors").instance(SEED)
    secrets = [task.checks[0].name, "HELPERS = {", task.solution]

    async def go(env: Any) -> str:
        await env.reset(seed=SEED, options={"task_id": task.id})
        # every name on the file system; the text of every file outside the system's /usr
        r = await sh(
            env,
            "echo 'HELPERS = {' > control.txt; "
            "find / \\( -path /proc -o -path /sys \\) -prune -o -name '*terminal_env*' -print 2>/dev/null; "
            f"grep -rIlF -e {shlex.quote(task.checks[0].name)} -e 'HELPERS = {{' --exclude-dir=proc --exclude-dir=sys "
            "--exclude-dir=usr / 2>/dev/null; echo end",
            timeout_s=60,
        )
        return str(r["stdout"])

    out = serve(go)
    # the search works (it finds the control, also where the workspace is mounted from) and finds nothing else
    assert set(out.split()) == {"/workspace/control.txt", "/box/work/control.txt", "end"}, out
    assert not any(s in out for s in secrets)
