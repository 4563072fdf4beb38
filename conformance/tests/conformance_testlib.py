"""Helpers of the suite's own tests: mutant servers as targets (tests/ is put on sys.path by conftest.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parents[1]
_NOT_MUTANTS = {"__init__", "__main__", "base", "proxy"}


def mutant_names() -> list[str]:
    """Every mutant module in tests/mutants (the healthy ``base`` excluded)."""
    return sorted(p.stem for p in (TESTS_DIR / "mutants").glob("*.py") if p.stem not in _NOT_MUTANTS)


def mutant_target(name: str):  # -> ProcessTarget
    """A server of ``mutants.NAME`` in a subprocess, as a certification target."""
    from openenv_conformance.targets import ProcessTarget, TargetOptions

    return ProcessTarget(lambda ready: [sys.executable, "-m", "mutants", f"mutants.{name}", ready],
                         spec=f"mutant:{name}", options=TargetOptions(cwd=str(TESTS_DIR), ready_timeout=60.0))


def mutant_module(name: str):
    return importlib.import_module(f"mutants.{name}")
