"""`make demo`'s script runs end to end: two real servers, a separate client process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_plays_both_reference_environments() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py")], cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Echo environment ready!" in out.stdout
    assert "Hello, World!" in out.stdout
    assert "demo OK" in out.stdout
