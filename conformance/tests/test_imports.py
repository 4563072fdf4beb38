"""The certifier's import structure, checked by machine.

* No two modules of a package import each other, directly or through others (the
  import-linter contract of conformance/pyproject.toml), and the contract does catch a cycle:
  a copy of the package with one deliberate cycle breaks it.
* No function-level import of the package's own modules remains, except in the pytest plugin,
  which is loaded by every pytest run of the environment and imports the suite only when
  ``--openenv-certify`` is given.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import openenv_conformance

SRC = Path(openenv_conformance.__file__).resolve().parent
PYPROJECT = SRC.parents[1] / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

#: Function-level imports of our own modules that are there on purpose.
LAZY_IMPORTS = {
    ("openenv_conformance.plugin", "openenv_conformance.context"),
    ("openenv_conformance.plugin", "openenv_conformance.declaration"),
    ("openenv_conformance.plugin", "openenv_conformance.runner"),
    ("openenv_conformance.plugin", "openenv_conformance.targets"),
}


def _lint_imports(src_root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the package found under ``src_root``, with the project's contract."""
    return subprocess.run(
        [str(LINT_IMPORTS), str(PYPROJECT), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=src_root,
        env={"PYTHONPATH": str(src_root), "PATH": "/usr/bin:/bin"},
    )


def test_no_import_cycle() -> None:
    r = _lint_imports(SRC.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kept, 0 broken" in r.stdout, r.stdout


def test_a_cycle_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "src"
    shutil.copytree(SRC, root / "openenv_conformance", ignore=shutil.ignore_patterns("__pycache__"))
    base = root / "openenv_conformance" / "transport" / "base.py"
    base.write_text(base.read_text() + "\nfrom openenv_conformance.transport import ws as _cycle  # noqa\n")
    r = _lint_imports(root)
    assert r.returncode != 0
    assert "No import cycles between the modules of a package BROKEN" in r.stdout, r.stdout


def _function_level_imports() -> set[tuple[str, str]]:
    found = set()
    for path in SRC.rglob("*.py"):
        module = ".".join(("openenv_conformance", *path.relative_to(SRC).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openenv_conformance"):
                    found.add((module, node.module or ""))
                elif isinstance(node, ast.Import):
                    found.update((module, a.name) for a in node.names if a.name.startswith("openenv_conformance"))
    return found


def test_no_function_level_import_of_our_own_modules_but_the_plugins() -> None:
    assert _function_level_imports() == LAZY_IMPORTS
