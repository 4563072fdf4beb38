"""Rule broken: the openenv/sandbox annotation is well-formed (RFC 0010). ``run_python``
declares its code in the argument ``source``, which its input schema does not have (the code
is in ``code``). Deterministic: the tool list is fixed."""

import openenv
from coding_env.server import CodingEnvironment
from mutants.sandboxlib import LEVELS

CAUGHT_BY = "sandbox.declared"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(CodingEnvironment):
    @openenv.tool(
        timeout_s=60.0,
        annotations={"openenv/sandbox": {"language": "python", "argument": "source", "output": "stdout"}},
    )
    def run_python(self, code: str) -> dict:
        """Run a Python script in the sandbox.

        Args:
            code: the script; its stdout and stderr are returned.
        """
        return super().run_python(code)
