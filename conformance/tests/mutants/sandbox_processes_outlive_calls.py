"""Rule broken: nothing of a call outlives it (RFC 0010). When a call ends, the sandbox's
supervisor kills only the call's first process, not every process of the call: background
children, daemons and a fork bomb's processes live on in the session's sandbox.
Deterministic: the probe waits until each of its processes has exec'd before it exits."""

from coding_env.server import CodingEnvironment as Env
from mutants.sandboxlib import LEVELS, patch_sandbox_files

CAUGHT_BY = "sandbox.processes"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env", "setup"]

KILL_FIRST_ONLY = """
def _kill_all(main_pid, namespaces):
    try:
        os.kill(main_pid, signal.SIGKILL)
        os.waitpid(main_pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
"""


def setup():
    patch_sandbox_files(supervisor=KILL_FIRST_ONLY, uses=("def _kill_all(",))
