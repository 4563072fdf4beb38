"""Rule broken: submitted code cannot make namespaces of its own (RFC 0010, escapes). The
seccomp filter lets unshare, setns and clone with namespace flags through, and the supervisor
no longer sets user.max_user_namespaces to 0 in the sandbox: a call can unshare a new user
namespace (and PID namespace), where it holds every capability. Deterministic."""

from coding_env.server import CodingEnvironment as Env
from mutants.sandboxlib import LEVELS, patch_sandbox_files

CAUGHT_BY = "sandbox.escapes"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env", "setup"]

ALLOW_NAMESPACES = "DENIED = tuple(d for d in DENIED if d not in ('unshare', 'setns'))\nCLONE_NS_FLAGS = 0\n"
KEEP_USERNS_SYSCTL = """
_set_sysctl = _sysctl
def _sysctl(name, value):
    return False if name == "user/max_user_namespaces" else _set_sysctl(name, value)
"""


def setup():
    patch_sandbox_files(
        confine=ALLOW_NAMESPACES,
        supervisor=KEEP_USERNS_SYSCTL,
        uses=("DENIED = (", "CLONE_NS_FLAGS = ", "def _sysctl(name", '"user/max_user_namespaces"'),
    )
