"""Rule broken: a session's disk is bounded, in bytes and in files (RFC 0010). coding_env's
sandboxes get a 64 GiB box with ten million inodes. Certified with a 256 MiB and 20,000-file
bound (``RUN_OPTIONS``): the box is a tmpfs, so what the probe writes is memory of the
machine. Deterministic: writes fail only at a bound."""

from coding_env.server import CodingEnvironment
from mutants.sandboxlib import LEVELS
from openenv.sandbox import Limits

CAUGHT_BY = "sandbox.disk"
COLLATERAL: frozenset[str] = frozenset()
RUN_OPTIONS = {"sandbox_disk_bound": 256 << 20, "sandbox_files_bound": 20_000}
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "RUN_OPTIONS", "Env"]


class Env(CodingEnvironment):
    limits = Limits(disk_bytes=64 << 30, files=10_000_000)
