"""`openenv play` on the terminal environment, driven through a pseudo-terminal as a person
would: the seeded episode is hello_file (the instance of that seed); a command typed at the
prompt solves it and the submit is rewarded 1."""

from __future__ import annotations

import json
import os
import sys

import pexpect

from terminal_env import TASKS

SEED = 31  # TASKS.sample(31) is hello_file
TASK = TASKS.sample(SEED).instance(SEED)
LINE = TASK.checks[0].expected  # the line the instance asks for, newline included


def test_a_terminal_task_is_solved_in_openenv_play() -> None:
    """A person can play a seeded episode by hand: the instruction shown is the seed's
    instance, and typing its solution is rewarded 1."""
    assert TASK.id == "hello_file"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "openenv.cli", "play", "terminal_env.server:TerminalEnvironment", "--seed", str(SEED)],
        encoding="utf-8",
        timeout=90,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR", "TERM": "dumb", "PYTHONUNBUFFERED": "1"},
        dimensions=(50, 200),
    )
    try:
        child.expect(r"playing terminal_env 0\.1\.0")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("2) run")
        child.sendline("run")
        answers = {"command": f"{TASK.solution}; cat {next(iter(TASK.answer))}", "timeout_s": ""}
        for _ in answers:  # one prompt per argument, in the order play asks (Enter: the default)
            child.expect([r"command: ", r"timeout_s \[30\]: "])
            child.sendline(answers[child.after.split()[0].rstrip(":")])
        child.expect_exact('result: {"stdout":' + json.dumps(LINE))
        child.expect(r"step=1 reward=0 ")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("4) submit")
        child.sendline("submit")
        # submit takes no arguments: play asks for none
        child.expect(r"step=2 reward=1 return=1 terminated=True")
        child.expect_exact("episode over")
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
