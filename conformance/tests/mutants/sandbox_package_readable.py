"""Rule broken: submitted code never sees the environment's package (RFC 0010, answer key).
coding_env's sandboxes mount the package directory read-only inside (``readable``) and no
longer check it invisible (no ``secrets``): the reference solutions in ``problems.py`` are
there to read and exec. Deterministic: the mount is the same for every call."""

from coding_env.server import _PACKAGE_DIR, CodingEnvironment
from mutants.sandboxlib import LEVELS
from openenv.sandbox import Sandbox

CAUGHT_BY = "sandbox.answer_key"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(CodingEnvironment):
    @classmethod
    def secrets(cls):
        return []

    @classmethod
    def new_sandbox(cls):
        return Sandbox(cls.limits, readable=[_PACKAGE_DIR])
