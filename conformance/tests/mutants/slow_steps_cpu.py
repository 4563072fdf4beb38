"""Not a mutant: ``slow_steps`` with a cpu step (see its docstring)."""

from mutants.slow_steps import ComputingStep as Env

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()

__all__ = ["Env"]
