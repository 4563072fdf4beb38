"""The checks of task fix-config-defaults."""

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


CODE = """
import json, os, sys, tempfile
sys.path.insert(0, "/app")
from config import load
def cfg(d):
    fd, p = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(d, f)
    return load(p)
out = [cfg({}), cfg({"port": 9000}), cfg({"host": "h", "port": 1, "debug": True})]
try:
    cfg({"port": "80"})
    out.append("no error")
except ValueError:
    out.append("ValueError")
print(json.dumps(out))
"""


def test_defaults():
    r = run("python3", "-I", "-c", CODE)
    assert r.returncode == 0, r.stderr[-800:]
    assert json.loads(r.stdout) == [
        {"host": "localhost", "port": 8000, "debug": False},
        {"host": "localhost", "port": 9000, "debug": False},
        {"host": "h", "port": 1, "debug": True},
        "ValueError",
    ], r.stdout


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
