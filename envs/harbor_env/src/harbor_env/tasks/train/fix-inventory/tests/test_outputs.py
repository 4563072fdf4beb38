"""The checks of task fix-inventory."""

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


#: The hidden cases: what the agent's class does, printed as it is (the tests compare it with what
#: it must be: a program of the agent's never reports a verdict), with quantities fresh for every run.
CODE = """
import json, sys
sys.path.insert(0, "/app")
from inventory import Inventory
a, b, c = (int(x) for x in sys.argv[1:4])
out = []
inv = Inventory()
inv.add("pear", a)
inv.remove("pear", a)
out.append(inv.stock.get("pear", 0))
try:
    inv.remove("plum", 1)
    out.append("no error")
except ValueError:
    out.append("ValueError")
out.append(inv.stock.get("plum", 0))
inv.add("fig", b)
try:
    inv.remove("fig", b + c)
    out.append("no error")
except ValueError:
    out.append("ValueError")
out.append(inv.stock["fig"])
inv.remove("fig", b)
out.append(inv.stock["fig"])
print(json.dumps(out))
"""
RNG = random.SystemRandom()


def test_visible_tests():
    # Their exit status is the word of a process that runs the agent's code: the hidden cases
    # below are what show the fix; this shows the visible tests were not broken.
    r = run("python3", "-m", "unittest", "-q", "test_inventory")
    assert r.returncode == 0, r.stderr[-800:]


def test_hidden_cases():
    a, b, c = RNG.randint(1, 99), RNG.randint(2, 99), RNG.randint(1, 9)
    r = run("python3", "-I", "-c", CODE, str(a), str(b), str(c))
    assert r.returncode == 0, r.stderr[-800:]
    assert json.loads(r.stdout) == [0, "ValueError", 0, "ValueError", b, 0], r.stdout


def test_tests_unchanged():
    assert "assertRaises(ValueError)" in (APP / "test_inventory.py").read_text()


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
