"""Rule broken: no socket of the host is reachable from the sandbox (RFC 0010, host sockets).
The host's /tmp is mounted into every sandbox (at /run/host-tmp): the UNIX sockets under it,
the certifier's canary among them, can be connected to. Deterministic: the mount is the same
for every call."""

from coding_env.server import CodingEnvironment as Env
from mutants.sandboxlib import LEVELS
from openenv.sandbox import _layout

CAUGHT_BY = "sandbox.host_sockets"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env", "setup"]

_bwrap_argv = _layout.bwrap_argv


def _with_host_tmp(*args, **kwargs):
    argv = _bwrap_argv(*args, **kwargs)
    last = len(argv) - 1 - argv[::-1].index("--remount-ro")  # the root's, once everything is mounted
    return [*argv[:last], "--bind", "/tmp", "/run/host-tmp", *argv[last:]]


def setup():
    _layout.bwrap_argv = _with_host_tmp
