#!/usr/bin/env python3
"""Run ``buf breaking`` against the previous commit of main (``make lint``).

The baseline is ``HEAD`` when the working tree has uncommitted contract changes, else
``main~1`` when HEAD is main (so a commit is checked against its parent), else ``main``
itself (a branch is checked against what it would land on).
A repository with no earlier commit, or one whose baseline has no buf module yet, has
nothing to break and passes with a message.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> int:
    buf = shutil.which("buf") or str(Path(sys.executable).parent / "buf")
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    dirty = (
        subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "buf.yaml", "proto", "envs"], cwd=ROOT).returncode != 0
    )
    if dirty:  # uncommitted contract edits are checked against the last commit
        ref = "HEAD"
    else:
        ref = "main~1" if branch in ("main", "HEAD") else "main"
    if not git("rev-parse", "--verify", "--quiet", ref):
        print(f"buf breaking: no baseline commit ({ref}); nothing to compare")
        return 0
    if not git("ls-tree", "--name-only", ref, "buf.yaml"):
        print(f"buf breaking: {ref} has no buf.yaml; nothing to compare")
        return 0
    against = f".git#ref={git('rev-parse', ref)}"
    print(f"buf breaking --against {ref}")
    return subprocess.run([buf, "breaking", "--against", against], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
