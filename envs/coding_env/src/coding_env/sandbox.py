"""Running untrusted Python: one confined process per call.

:class:`Sandbox` owns a private directory (random name, in a parent no sandboxed process can
list) and runs each call in a fresh process (``_runner.py``) that confines itself before the
code runs: resource limits, an unprivileged user when started as root, a network namespace
when possible, Landlock (files, TCP, signals) and seccomp (sockets, process groups, ptrace).
The parent adds what only it can: a wall-clock timeout that kills the whole process group,
output captured to files outside the sandbox and capped in size, and the clean-up of every
process left behind. Expected outputs of tests never enter the sandbox: the child reports
what the function returned and :mod:`coding_env.problems` compares.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Limits", "RunResult", "Sandbox", "SandboxUnavailable", "probe"]

RUNNER = Path(__file__).with_name("_runner.py")
#: Layers the sandbox requires by default; a machine without them cannot run code safely.
REQUIRED = ("rlimits", "not-dumpable", "no-new-privs", "landlock", "seccomp")
NOBODY = 65534
OUTPUT_CAP = 64 * 1024


class SandboxUnavailable(RuntimeError):
    """The machine cannot confine code as required (e.g. a kernel without Landlock)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-call limits. ``wall_s`` is enforced by the parent, the others by the kernel."""

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_bytes: int = 512 * 1024 * 1024
    file_bytes: int = 1024 * 1024
    open_files: int = 64
    processes: int = 16


@dataclasses.dataclass
class RunResult:
    """What one call did: output (capped), exit code (negative: killed by that signal),
    wall time, whether the wall-clock timeout fired, the isolation layers in force and,
    for tests, one record per case."""

    stdout: str
    stderr: str
    exit_code: int
    time_s: float
    timed_out: bool
    isolation: list[str]
    cases: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    load_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "time_s": round(self.time_s, 4),
            "timed_out": self.timed_out,
        }


def _world_readable(path: str) -> bool:
    """Whether the unprivileged user could read ``path`` (every parent searchable by others)."""
    p = Path(path).resolve()
    try:
        if not p.stat().st_mode & 0o004:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in p.parents)
    except OSError:
        return False


def interpreter() -> str:
    """The Python that runs sandboxed code: this one, unless the sandbox drops root to
    ``nobody`` and this interpreter's standard library is not readable by others (e.g.
    installed under /root), then the system's ``python3``."""
    if os.geteuid() != 0 or _world_readable(sysconfig.get_paths()["stdlib"]):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK) and _world_readable(candidate):
            return candidate
    raise SandboxUnavailable("no Python interpreter readable by the unprivileged user")


def _read_paths(python: str) -> list[str]:
    paths = {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/etc", "/dev/urandom", "/dev/zero"}
    if python == sys.executable:
        for key in ("stdlib", "platstdlib"):
            with contextlib.suppress(KeyError):
                paths.add(sysconfig.get_paths()[key])
        paths.add(sys.base_prefix)
    real = os.path.realpath(python)
    paths.update({real, os.path.dirname(real)})
    return sorted(paths)


def _root_dir() -> Path:
    """The parent of every sandbox directory: listable by nobody but its owner's server
    (mode 0o311 as root, whose sandboxes run as nobody; 0o300 otherwise)."""
    base = Path(tempfile.gettempdir()) / f"coding-env-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    os.chmod(base, 0o311 if os.geteuid() == 0 else 0o300)
    return base


class Sandbox:
    """A private directory and the processes that run code in it.

    ``require`` lists the isolation layers a call must have (:data:`REQUIRED`); a call on a
    machine lacking one raises :class:`SandboxUnavailable` before any untrusted code runs.
    Thread-safe for sequential use by one session; sessions each own a Sandbox.
    """

    def __init__(self, limits: Limits | None = None, require: Sequence[str] = REQUIRED) -> None:
        self.limits = limits or Limits()
        self.require = tuple(require)
        self._root = _root_dir()
        self.workdir = self._root / secrets.token_hex(16)
        self.workdir.mkdir(mode=0o700)
        self._io = self._root / f".io-{secrets.token_hex(16)}"
        self._io.mkdir(mode=0o700)
        if os.geteuid() == 0:
            os.chown(self.workdir, NOBODY, NOBODY)
        self.isolation: list[str] = []
        self.python = interpreter()

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self._io, ignore_errors=True)

    def run(self, code: str, *, limits: Limits | None = None) -> RunResult:
        """Run ``code`` as a script (``__name__ == "__main__"``)."""
        return self._call({"mode": "run", "code": code}, limits or self.limits)

    def call_cases(
        self, code: str, entry_point: str, cases: Sequence[Sequence[Any]], *, limits: Limits | None = None
    ) -> RunResult:
        """Load ``code`` as a module and call ``entry_point(*args)`` for each case."""
        req = {"mode": "tests", "code": code, "entry_point": entry_point, "cases": [list(c) for c in cases]}
        return self._call(req, limits or self.limits)

    def _call(self, req: dict[str, Any], limits: Limits) -> RunResult:
        req = {
            **req,
            "workdir": str(self.workdir),
            "read_paths": _read_paths(self.python),
            "require": list(self.require),
            "limits": dataclasses.asdict(limits),
        }
        paths = [self._io / n for n in ("stdout", "stderr", "results")]
        files = [open(p, "w+b") for p in paths]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.workdir), "TMPDIR": str(self.workdir)}
        env["LANG"] = "C.UTF-8"
        req["results_fd"] = files[2].fileno()
        start = time.monotonic()
        timed_out = False
        try:
            proc = subprocess.Popen(
                [self.python, "-I", "-S", "-B", str(RUNNER)],
                stdin=subprocess.PIPE,
                stdout=files[0],
                stderr=files[1],
                pass_fds=(files[2].fileno(),),
                env=env,
                cwd="/",
                start_new_session=True,
            )
            try:
                assert proc.stdin is not None
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.write(json.dumps(req).encode())
                    proc.stdin.close()
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
            elapsed = time.monotonic() - start
            out, err, res = (_read(f) for f in files)
        finally:
            for f in files:
                f.close()
        records = [json.loads(line) for line in res.splitlines() if line.startswith("{")]
        head = records[0] if records else {}
        if "error" in head or (records and not timed_out and proc.returncode == 71):
            raise SandboxUnavailable(head.get("error") or f"missing isolation layers; have {head.get('isolation')}")
        if not records and not timed_out:
            raise SandboxUnavailable(f"the sandbox did not start (exit {proc.returncode}): {err[-500:]}")
        isolation = list(head.get("isolation", []))
        self.isolation = isolation
        cases = [r for r in records[1:] if "case" in r]
        load_error = next((r["load_error"] for r in records[1:] if "load_error" in r), None)
        return RunResult(out, err, proc.returncode, elapsed, timed_out, isolation, cases, load_error)


def _read(f: Any) -> str:
    f.flush()
    f.seek(0)
    data: bytes = f.read(OUTPUT_CAP + 1)
    text = data[:OUTPUT_CAP].decode("utf-8", errors="replace")
    return text + ("\n[output truncated]" if len(data) > OUTPUT_CAP else "")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the call's whole process group (the child cannot leave it: seccomp denies
    setsid/setpgid), then reap the child and any orphan re-parented to this process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-proc.pid, os.WNOHANG)[0] > 0:
            pass


def probe() -> list[str]:
    """The isolation layers this machine gives sandboxed code (runs one empty call)."""
    box = Sandbox(require=())
    try:
        return box.run("pass").isolation
    finally:
        box.close()
