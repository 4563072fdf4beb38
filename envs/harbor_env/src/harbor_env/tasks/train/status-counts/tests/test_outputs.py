"""The checks of task status-counts."""

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


def test_counts():
    got = json.loads((APP / "status_counts.json").read_text())
    assert got == {"200": 6, "301": 1, "404": 2, "500": 1, "503": 1}, got


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
