"""Rule broken: nothing of a call outlives it (RFC 0010). The seccomp filter lets SysV IPC
through (shmget, semget, msgget), and the supervisor no longer removes what a call made: its
segments, semaphores and queues stay in the session's IPC namespace for the next call to find.
Deterministic."""

from coding_env.server import CodingEnvironment as Env
from mutants.sandboxlib import LEVELS, patch_sandbox_files

CAUGHT_BY = "sandbox.ipc"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env", "setup"]


def setup():
    patch_sandbox_files(
        confine="DENIED = tuple(d for d in DENIED if d not in ('shmget', 'semget', 'msgget'))\n",
        supervisor="_remove_ipc = lambda: None\n",
        uses=('"shmget", "semget", "msgget"', "def _remove_ipc("),
    )
