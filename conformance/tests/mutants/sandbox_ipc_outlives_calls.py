"""Rule broken: nothing of a call outlives it (RFC 0010). The seccomp filter lets SysV IPC
through (shmget, semget, msgget), and nothing removes what a call made: its segments,
semaphores and queues stay in the session's IPC namespace for the next call to find.
Deterministic."""

from coding_env.server import CodingEnvironment as Env
from mutants.sandboxlib import LEVELS, patch_sandbox_files

CAUGHT_BY = "sandbox.ipc"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env", "setup"]


def setup():
    patch_sandbox_files(
        confine="DENIED = tuple(d for d in DENIED if d not in ('shmget', 'semget', 'msgget'))\n",
        uses=('"shmget", "semget", "msgget"',),
    )
