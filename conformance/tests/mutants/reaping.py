"""Not a mutant: the healthy counter served with a 2 s idle timeout (the server
of ``idle_never_reaped`` with its reaper working). Its test runs only
``concurrency.idle_reaped``: a 2 s idle timeout could reap a session that another check
holds while it waits on something else."""

from mutants.base import Counter as Env

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
SERVER_KWARGS = {"idle_timeout_s": 2.0}

__all__ = ["Env"]
