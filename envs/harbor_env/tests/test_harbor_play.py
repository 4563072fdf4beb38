"""``openenv play`` on a Harbor task, in a terminal (pexpect), as a person plays it: pick the
``shell`` tool, type a command that solves the task, pick ``submit``; the task's tests give 1."""

from __future__ import annotations

import os
import sys

import pexpect
from harbor_env.server import SHIPPED

WAIT_S = 120.0


def test_a_harbor_task_is_played_by_hand_and_graded_by_its_tests() -> None:
    env = {
        **os.environ,
        "GRPC_VERBOSITY": "ERROR",
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",
        "HARBOR_TASKS": str(SHIPPED / "train" / "count-errors"),
    }
    argv = ["-m", "openenv.cli", "play", "harbor_env.server:HarborEnvironment", "--seed", "1"]
    child = pexpect.spawn(sys.executable, argv, encoding="utf-8", timeout=WAIT_S, env=env, dimensions=(50, 200))
    try:
        child.expect(r"playing harbor_env 0\.1\.0")
        child.expect_exact("error_count.txt")
        child.expect(r"step=0 reward=- return=0 terminated=False truncated=False")
        child.sendline("s")
        child.expect_exact("1) shell  2) python  3) read_file  4) write_file  5) edit_file  6) submit")
        child.sendline("shell")
        child.expect_exact("command")
        child.sendline("""awk '$2 == "ERROR"' app.log | wc -l > error_count.txt; cat error_count.txt""")
        child.expect(r"step=1 reward=0 return=0 terminated=False")
        child.sendline("s")
        child.expect_exact("tool: ")
        child.sendline("6")
        # submit takes no arguments: play asks for none
        child.expect(r"step=2 reward=(\S+) return=(\S+) terminated=(\w+)")
        assert child.match.groups() == ("1", "1", "True")
        child.expect_exact("episode over")
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
