"""Every ``pip install`` line of examples/*.py works from a clone: this project is on no package
index, so a requirement must be a path of the repository (``./python[rl]``), never the bare
distribution name (``'protoenv[rl]'``, which a resolver looks up on an index and does not find),
and each path must exist at the clone's root."""

from __future__ import annotations

import re
import shlex

from openenv_testkit import REPO_ROOT

OURS = {"protoenv", "protoenv-catalog", "protoenv-conformance"}


def test_install_hints_of_the_examples_name_paths_of_the_clone() -> None:
    lines = [
        (path.name, line.split("#", 1)[0])
        for path in sorted((REPO_ROOT / "examples").glob("*.py"))
        for line in path.read_text().splitlines()
        if line.strip().startswith("pip install")
    ]
    assert lines  # the examples do say how to install them
    for name, line in lines:
        for arg in shlex.split(line)[2:]:
            if arg.startswith("-") or "==" in arg:
                continue  # options, pinned index packages (torch==...)
            base = re.sub(r"\[.*\]$", "", arg)
            assert base not in OURS, f"{name}: {arg!r} is on no package index: install ./python from a clone"
            assert base.startswith(("./", "<path")), f"{name}: {arg!r} is not a path of the clone"
            if base.startswith("./"):
                assert (REPO_ROOT / base).is_dir(), f"{name}: {base} is not a directory of the clone"
