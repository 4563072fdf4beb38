"""The checks of task fix-package-import."""

import json
import os
import random
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


CODE = "import mathkit; print(mathkit.mean([1, 2, 3]), mathkit.median([4, 1, 3, 2]))"
#: The same with numbers fresh for every run of the tests (the module prints what it computed; the
#: tests compare), so that no constant output passes.
FRESH = (
    "import json, sys, mathkit; xs, ys = (json.loads(a) for a in sys.argv[1:3]); "
    "print(mathkit.mean(xs), mathkit.median(ys))"
)
RNG = random.SystemRandom()


def _fresh(cwd: str, env: dict | None = None) -> None:
    xs = [RNG.randint(-99, 99) for _ in range(RNG.randint(2, 9))]
    ys = sorted(RNG.randint(-99, 99) for _ in range(RNG.randint(2, 9)))
    n = len(ys)
    median = ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2
    RNG.shuffle(ys)
    r = run("python3", "-c", FRESH, json.dumps(xs), json.dumps(ys), cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr[-500:]
    assert [float(v) for v in r.stdout.split()] == [sum(xs) / len(xs), median], (xs, ys, r.stdout)


def test_from_app():
    r = run("python3", "-c", CODE)
    assert r.returncode == 0 and r.stdout.split() == ["2.0", "2.5"], (r.stdout, r.stderr[-500:])
    _fresh("/app")


def test_from_elsewhere():
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": "/app"}
    r = run("python3", "-c", CODE, cwd="/tmp", env=env)
    assert r.returncode == 0 and r.stdout.split() == ["2.0", "2.5"], (r.stdout, r.stderr[-500:])
    _fresh("/tmp", env)


def test_modules_kept():
    assert sorted(p.name for p in (APP / "mathkit").glob("*.py")) == ["__init__.py", "helpers.py", "stats.py"]


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
