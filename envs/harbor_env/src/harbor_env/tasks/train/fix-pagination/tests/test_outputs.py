"""The checks of task fix-pagination."""

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


CODE = (
    "import json, sys; sys.path.insert(0, '/app'); from paginate import page; xs = list(range(1, 11)); "
    "print(json.dumps([page(xs, 1, 3), page(xs, 4, 3), page(xs, 5, 3), page(xs, 2, 5), page([], 1, 2)]))"
)


def test_pages():
    r = run("python3", "-I", "-c", CODE)
    assert r.returncode == 0, r.stderr[-500:]
    assert json.loads(r.stdout) == [[1, 2, 3], [10], [], [6, 7, 8, 9, 10], []], r.stdout


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
