"""`openenv play` on the repository environment, driven through a pseudo-terminal as a person
would: the seeded episode is the fahrenheit task; an edit typed at the argument prompts fixes
it and the submit (arguments as JSON) is rewarded 1, shown as the reward alone (strict feedback)."""

from __future__ import annotations

import os
import sys

import pexpect

from repo_env import TASKS

SEED = 14  # TASKS.sample(14) is fahrenheit


def test_a_repository_task_is_fixed_and_submitted_in_openenv_play() -> None:
    assert TASKS.sample(SEED).id == "fahrenheit"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "openenv.cli", "play", "repo_env.server:RepoEnvironment", "--seed", str(SEED)],
        encoding="utf-8",
        timeout=90,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR", "TERM": "dumb", "PYTHONUNBUFFERED": "1"},
        dimensions=(50, 200),
    )
    try:
        child.expect(r"playing repo_env 0\.1\.0")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("5) edit")
        child.sendline("edit")
        answers = {"new": "c * 9 / 5 + 32", "old": "c * 5 / 9 + 32", "path": "units/temperature.py"}
        for _ in answers:  # one prompt per argument, in the order play asks
            child.expect([f"{name}: " for name in answers])
            child.sendline(answers[child.after.rstrip(": ")])
        child.expect(r"edited units/temperature\.py")
        child.expect(r"step=1 reward=0 ")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("10) submit")
        child.sendline("submit")
        # submit takes no arguments: play asks for none; strict feedback (the default): its
        # result is the reward alone, without the pass counts
        child.expect(r"reward: 1")
        child.expect(r"step=2 reward=1 return=1 terminated=True")
        child.expect_exact("episode over")
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
