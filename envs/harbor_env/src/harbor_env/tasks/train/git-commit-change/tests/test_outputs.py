"""The checks of task git-commit-change."""

import json
import os
import shlex
import subprocess
from pathlib import Path

APP = Path("/app")

#: harbor_env's runner of the agent's programs (see run); empty elsewhere.
UNTRUSTED = shlex.split(os.environ.get("OPENENV_UNTRUSTED", ""))


def run(*argv: str, cwd: str = "/app", timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    """Run a program of the agent's: its output captured, bounded in time, and with a lesser identity
    where the grader offers one ($OPENENV_UNTRUSTED: it can neither read these tests, write their
    reward nor signal them; Harbor itself has none, so the program runs as it is)."""
    return subprocess.run([*UNTRUSTED, *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


# The agent's git configuration runs nothing here (hooks, fsmonitor; no global or system file).
GIT = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
GIT_ENV = {
    "PATH": os.environ["PATH"],
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def _git(*args: str) -> str:
    r = run("git", *GIT, *args, env=GIT_ENV)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_message():
    assert _git("log", "-1", "--format=%s").strip() == "Fix typo in README"


def test_clean_and_committed():
    assert _git("status", "--porcelain").strip() == ""
    assert "A widget library." in _git("show", "HEAD:README.md")
    assert _git("rev-list", "--count", "HEAD").strip() == "2"
    assert _git("branch", "--show-current").strip() == "main"


def _main() -> None:
    checks = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    results = {}
    for name, fn in checks:
        try:
            fn()
            results[name] = 1.0
            print(f"PASS {name}")
        except Exception as e:  # noqa: BLE001 - every failure is a failed check
            results[name] = 0.0
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    reward = 1.0 if results and all(v == 1.0 for v in results.values()) else 0.0
    with open("/logs/verifier/reward.json", "w") as f:
        json.dump({"reward": reward, **results}, f)


if __name__ == "__main__":
    _main()
