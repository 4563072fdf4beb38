"""Rule broken: submitted code never sees the environment's package (RFC 0010, answer key).
coding_env's sandboxes mount the package directory read-only inside (``readable``) and no
longer check it invisible (no ``secrets``): the reference solutions in ``problems.py`` are
there to read and exec. Deterministic: the mount is the same for every call."""

import coding_env.server
from coding_env.server import _PACKAGE_DIR, CodingEnvironment
from mutants.sandboxlib import LEVELS
from openenv.sandbox import Sandbox

CAUGHT_BY = "sandbox.answer_key"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env", "setup"]


class ReadableSandbox(Sandbox):
    def __init__(self, *args, **kwargs):
        kwargs["secrets"] = ()
        kwargs["readable"] = [_PACKAGE_DIR]
        super().__init__(*args, **kwargs)


def setup():
    coding_env.server.Sandbox = ReadableSandbox  # what the environment builds its sandboxes with


class Env(CodingEnvironment):
    @classmethod
    def secrets(cls):
        return []
