"""Rule broken: a session's process limit counts no other session (RFC 0010, processes).
Every sandbox runs as the same uid, whose processes and threads are limited to 20 in all
(RLIMIT_NPROC of the server's children, counted for that uid across every sandbox): a
session holding its processes leaves none for another. Needs root (the sandboxes' uid must
be one no other process uses; without root they run as the caller's, whose processes vary).
Deterministic: the holding session forks until refused, so the limit is always exhausted."""

import os
import resource

from coding_env.server import CodingEnvironment as Env
from mutants.sandboxlib import LEVELS
from openenv.sandbox import _box

CAUGHT_BY = "sandbox.process_isolation"
# The fork bomb of sandbox.processes takes every process of the shared limit: its bystander fails too.
COLLATERAL = frozenset({"sandbox.processes"})
REQUIRES_ROOT = True
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "REQUIRES_ROOT", "Env", "setup"]


def setup():
    if os.geteuid() != 0:
        raise RuntimeError("this mutant needs root: its sandboxes must run as a uid of their own")
    uid = 1_900_000_000 + os.getpid() % 1_000_000  # one uid for every sandbox of this server
    _box.Sandbox._outer_uid = lambda self: uid
    # Root itself is exempt; the sandboxes' uid inherits the limit, counted across all its processes.
    resource.setrlimit(resource.RLIMIT_NPROC, (20, 20))
