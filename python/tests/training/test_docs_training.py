"""Every ```python block of docs/training.md, concatenated, runs as one script (servers on loopback)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from openenv_testkit import REPO_ROOT


def test_docs_training_examples_run(tmp_path: Path) -> None:
    text = (REPO_ROOT / "docs" / "training.md").read_text()
    code = "\n\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    assert "openenv.gym.make" in code and "environment_factory" in code and "env_task" in code
    script = tmp_path / "training_examples.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all training examples passed" in proc.stdout
