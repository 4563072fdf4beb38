"""Rule broken: the memory of a call is bounded, all its processes together (RFC 0010). The
supervisor's memory watchdog never fires and the per-process address-space limit is 64 GiB:
several children each holding 400 MiB hold it all at once. Certified with a 1 GiB bound
(``RUN_OPTIONS``) so the probe needs 1.25 GiB of the machine, not 2.25. Deterministic: the
probe's children hold their memory until every one of them has it."""

from coding_env.server import CodingEnvironment
from mutants.sandboxlib import LEVELS, patch_sandbox_files
from openenv.sandbox import Limits

CAUGHT_BY = "sandbox.memory"
COLLATERAL: frozenset[str] = frozenset()
RUN_OPTIONS = {"sandbox_memory_bound": 1 << 30}
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "RUN_OPTIONS", "Env", "setup"]


def setup():
    patch_sandbox_files(supervisor="Memory.over = lambda self, pids: False\n", uses=("class Memory", "def over("))


class Env(CodingEnvironment):
    limits = Limits(memory_bytes=64 << 30)
