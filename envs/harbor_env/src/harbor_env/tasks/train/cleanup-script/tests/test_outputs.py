"""The checks of task cleanup-script."""

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

APP = Path("/app")

#: harbor_env's runner of the agent's programs (see run); empty elsewhere.
UNTRUSTED = shlex.split(os.environ.get("OPENENV_UNTRUSTED", ""))


def run(*argv: str, cwd: str = "/app", timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    """Run a program of the agent's: its output captured, bounded in time, and with a lesser identity
    where the grader offers one ($OPENENV_UNTRUSTED: it can neither read these tests, write their
    reward nor signal them; Harbor itself has none, so the program runs as it is)."""
    return subprocess.run([*UNTRUSTED, *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


def _tree(root: Path) -> None:
    for rel in ("a.tmp", "keep.txt", "sub/b.tmp", "sub/deeper/c d.tmp", "sub/deeper/keep.tmp.bak", "x.TMP"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")


def test_executable():
    assert os.access(APP / "clean.sh", os.X_OK)


def test_deletes_and_counts():
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        _tree(root)
        r = run(str(APP / "clean.sh"), str(root))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "3", r.stdout
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        assert left == ["keep.txt", "sub/deeper/keep.tmp.bak", "x.TMP"], left


def test_empty_directory():
    with tempfile.TemporaryDirectory() as d:
        r = run(str(APP / "clean.sh"), d)
        assert r.returncode == 0 and r.stdout.strip() == "0", (r.stdout, r.stderr)


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
