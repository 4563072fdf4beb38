"""Running untrusted code: a sandbox an RL policy cannot game (docs/security.md, "Code
environments").

An environment that runs submitted code gives each session a :class:`Sandbox`; each call runs
in it confined, and nothing of the call outlives it but the files of its workspace::

    from openenv.sandbox import Limits, Sandbox

    box = Sandbox(Limits(wall_s=10), secrets=[my_package_dir])
    r = box.run("print(sum(range(10)))")            # RunResult: stdout '45\\n', exit_code 0
    f = box.call_function(code, "solve", [[1, 2], [3, 4]])   # FunctionResult: one CaseResult per case
    box.close()

What you may rely on, on every machine where a sandbox starts (else
:class:`SandboxUnavailable` is raised before any code runs, naming what is missing):

* **A private view**: bubblewrap's user, mount, PID, IPC, network and UTS namespaces; the
  code sees a read-only runtime (the system's libraries and the interpreter's standard
  library, every ``site-packages`` hidden), a synthetic ``/etc``, its own ``/proc``, a minimal
  ``/dev``, and a writable workspace, ``/tmp`` and ``/dev/shm`` on one tmpfs of
  ``Limits.disk_bytes``. Nothing of the host's ``/tmp``, ``/run``, ``/home`` or ``/opt``, so no
  host UNIX socket and no file of the server's; ``secrets`` are checked invisible at start.
* **No way out**: no capabilities, ``no_new_privs``, no nested user namespaces or mounts
  (seccomp), no network but a loopback of its own, Landlock on files, TCP and signals,
  seccomp against the kernel's riskier interfaces, not dumpable.
* **Bounded per call**: wall time, CPU time per process, resident memory of all the call's
  processes together, processes and threads (counted in the sandbox's own user namespace, so
  no other session or server thread counts), open files; per session: bytes and files on disk.
* **Nothing outlives a call**: when its first process ends or a limit is reached, every
  process of the call is killed, ``/tmp`` and ``/dev/shm`` emptied; SysV IPC is refused (and
  what a call made where that was allowed is removed).
* **Grading the code cannot forge**: :meth:`Sandbox.call_function` sends each case's
  arguments only after the previous answer, with a nonce the answer must echo; expected values
  never enter the sandbox (compare in the server).
* As root, the sandbox runs as a uid of its own, never root outside.

:func:`put_files` and :func:`get_files` copy files into and out of a workspace (only regular
files and directories; links and special files are never followed, read or recreated).
:func:`clean_copy` makes what a verifier runs in the agent's files configure none of its tools
(git filters, hooks, fsmonitor, aliases, includes: RFC 0015), and :data:`VERIFIER_ENV` keeps the
work tree off the interpreter's ``sys.path`` and the agent's git configuration out of git's.

:func:`check` is the start-up check an environment runs once (``Environment.preflight``).
:func:`container_security_options` are what a container needs to host sandboxes
(``openenv.deploy.start_container`` passes them to images labelled ``openenv.sandbox``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from openenv.sandbox._box import (
    ALLOW_MISSING_ENV,
    REQUIRED,
    CaseResult,
    FunctionResult,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
)
from openenv.sandbox._clean import VERIFIER_ENV, clean_copy, clean_git_config
from openenv.sandbox._container import container_security_options, seccomp_profile
from openenv.sandbox._files import WorkspaceFiles, get_files, put_files, safe_relpath

__all__ = [
    "ALLOW_MISSING_ENV",
    "REQUIRED",
    "CaseResult",
    "FunctionResult",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "VERIFIER_ENV",
    "WorkspaceFiles",
    "check",
    "clean_copy",
    "clean_git_config",
    "container_security_options",
    "get_files",
    "put_files",
    "safe_relpath",
    "seccomp_profile",
]


def check(
    *,
    require: Sequence[str] | None = None,
    allow_missing: Iterable[str] | None = None,
    secrets: Iterable[str] = (),
) -> list[str]:
    """Start a sandbox once, run an empty call, and return the layers in force.

    Raises:
        SandboxUnavailable: as :meth:`Sandbox.start`, or the empty call did not run.
    """
    with Sandbox(require=require, allow_missing=allow_missing, secrets=secrets) as box:
        r = box.run("pass")
        if r.exit_code != 0:
            raise SandboxUnavailable(f"an empty call failed in the sandbox (exit {r.exit_code}): {r.stderr[-500:]}")
        return list(box.isolation)
