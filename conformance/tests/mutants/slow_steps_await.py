"""Not a mutant: ``slow_steps`` with a await step (see its docstring)."""

from mutants.slow_steps import AwaitingStep as Env

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()

__all__ = ["Env"]
