"""Helpers of the suite's own tests: mutant servers as targets (tests/ is put on sys.path by conftest.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parents[1]
_NOT_MUTANTS = {"__init__", "__main__", "base", "proxy", "reaping"}


def mutant_names() -> list[str]:
    """Every mutant module in tests/mutants (the healthy ``base`` and the controls excluded)."""
    return sorted(
        p.stem
        for p in (TESTS_DIR / "mutants").glob("*.py")
        if p.stem not in _NOT_MUTANTS and not p.stem.startswith("control_")
    )


def control_names() -> list[str]:
    """The controls in tests/mutants (``control_*``): correct environments making unusual but
    valid declarations, which must certify."""
    return sorted(p.stem for p in (TESTS_DIR / "mutants").glob("control_*.py"))


def mutant_target(name: str, transport: str = "grpc"):  # -> ProcessTarget
    """A server of ``mutants.NAME`` in a subprocess, as a certification target: its gRPC and
    HTTP sides, the checks speaking ``transport`` (the other side is the parity peer)."""
    from openenv_conformance.targets import ProcessTarget, TargetOptions

    target = ProcessTarget(
        lambda ready, http: [sys.executable, "-m", "mutants", f"mutants.{name}", ready, http],
        spec=f"mutant:{name}",
        options=TargetOptions(cwd=str(TESTS_DIR), ready_timeout=60.0),
        http_ready=True,
    )
    target.use(transport)
    return target


def mutant_module(name: str):
    return importlib.import_module(f"mutants.{name}")
