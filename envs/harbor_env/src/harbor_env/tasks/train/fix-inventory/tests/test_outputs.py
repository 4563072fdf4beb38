"""The checks of task fix-inventory."""

import json
import subprocess
from pathlib import Path

APP = Path("/app")


def run(*argv: str, cwd: str = "/app", timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    """Run a program of the agent's (its output captured, bounded in time)."""
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


CODE = """
import sys
sys.path.insert(0, "/app")
from inventory import Inventory
inv = Inventory()
inv.add("pear", 5)
inv.remove("pear", 5)
assert inv.stock.get("pear", 0) == 0, inv.stock
try:
    inv.remove("plum", 1)
except ValueError:
    pass
else:
    raise AssertionError("removing a missing item did not raise")
assert inv.stock.get("plum", 0) == 0, inv.stock
inv.add("fig", 2)
try:
    inv.remove("fig", 3)
except ValueError:
    pass
else:
    raise AssertionError("removing too many did not raise")
assert inv.stock["fig"] == 2, inv.stock
print("ok")
"""


def test_visible_tests():
    r = run("python3", "-m", "unittest", "-q", "test_inventory")
    assert r.returncode == 0, r.stderr[-800:]


def test_hidden_cases():
    r = run("python3", "-I", "-c", CODE)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-800:]


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
