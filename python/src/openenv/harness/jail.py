"""The agent's jail: what an agent's own shell can see and reach while the runner scores it.

A coding agent runs shell commands of its model's choosing, on the runner's machine, while the
runner holds the environment session that pays its reward. Unconfined, that shell can read every
process's ``/proc/PID/environ`` and ``cmdline`` (the environment server's task directory, the
runner's tokens), the installed environment packages (their tasks and reference solutions), the
repository's ``envs/``, and connect to the environment server to open sessions of its own (an
oracle to try answers on). :class:`Jail` closes those channels with bubblewrap: the runner starts
the agent through :meth:`Jail.wrap`, which gives it

* its own PID, IPC, UTS and cgroup namespaces and a fresh ``/proc``: no other process of the
  machine is visible, so no environment or command line but the agent's own;
* its own network namespace (unless ``share_net``): only its loopback, where the runner's server
  (capture proxy, tool relay, MCP) is brought in through a UNIX socket
  (:mod:`openenv.harness._jailinit`); the environment server, the model endpoint and every other
  service of the host are unreachable;
* its own user namespace, no capabilities, no further user namespaces (``--disable-userns`` where
  bubblewrap has it): it cannot undo a mount;
* the host's file system read-only, with these hidden (an empty read-only tmpfs, or
  ``/dev/null`` over a file; :func:`environment_secrets`): every installed openenv environment
  (the distributions of the entry point group ``openenv.environments``: their packages, their
  metadata and, for a local or editable install, the project directory), the repository's ``envs/``, ``.cache``
  and ``.git`` (and its other worktrees) when the runner runs from a checkout, the user's
  package and model caches (``~/.cache``, ``$PIP_CACHE_DIR``, ``$UV_CACHE_DIR``, ``$HF_HOME``),
  container image stores (``/var/lib/docker``, ...), ``$HARBOR_TASKS`` when the runner has it,
  the run directory but the episode's own directories, and every path of ``hide``;
* ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev`` fresh and empty; writable: only its workspace,
  its private home (``HOME``) and those fresh directories;
* an environment reduced to what it needs: the variables its harness is configured with, plus
  ``PATH``, locale, ``TERM``, ``TZ``, ``USER``, ``LOGNAME``, ``SHELL`` and the names in
  ``pass_env``; nothing else the runner inherited (no task directory, no token).

The runner's Python and the agent's program stay readable even under a hidden path (they are
mounted back read-only), since the agent cannot run without them. The agent keeps the runner's
user id: files that user may read and that are not hidden stay readable (run the runner as a user
without credentials it does not need). docs/harnesses.md ("The agent's jail") is the guide.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from openenv.harness.agents import AgentContext, AgentLaunch
from openenv.sandbox._layout import bwrap_path

__all__ = ["DEFAULT_JAIL", "ENVIRONMENTS_GROUP", "Jail", "JailUnavailable", "environment_secrets"]

#: The entry point group naming installed openenv environments (``openenv catalog`` reads it too).
ENVIRONMENTS_GROUP = "openenv.environments"
JAIL_INIT = Path(__file__).with_name("_jailinit.py")
#: Empty and writable in the jail.
FRESH = ("/tmp", "/var/tmp", "/run")
#: Where the runner's UNIX socket appears inside the jail (in a fresh directory).
SOCKET_IN_JAIL = "/run/openenv-harness/harness.sock" if os.path.isdir("/run") else "/tmp/.openenv-harness/harness.sock"
#: Container image stores: an image's layers hold the environment's package as installed in it.
STORES = ("/var/lib/docker", "/var/lib/containerd", "/var/lib/containers", "/var/lib/buildkit")
#: Variables naming task directories of the project's environments (harbor_env's): hidden when set.
TASK_VARIABLES = ("HARBOR_TASKS",)
#: Inherited variables an agent keeps (besides ``pass_env`` and what its harness sets).
KEEP_ENV = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "COLUMNS", "LINES"})
KEEP_ENV_PREFIXES = ("LC_",)

MISSING = (
    "bubblewrap (bwrap) is not installed, and the runner confines every agent with it: the agent's "
    "shell could otherwise read the environment's tasks and solutions and reach its server. Install it "
    "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; or point $OPENENV_BWRAP "
    "at the binary), or pass --no-jail to run the agent unconfined (unsafe for training: docs/harnesses.md)."
)
REFUSED = (
    "the agent's jail cannot start here: bubblewrap said {why!r}. It needs user namespaces an unprivileged "
    "process may create: allow them (Ubuntu 23.10+: sysctl kernel.apparmor_restrict_unprivileged_userns=0; "
    "older Debian: sysctl kernel.unprivileged_userns_clone=1; elsewhere user.max_user_namespaces > 0), or run "
    "the runner where they are allowed (a VM, or a container started with --security-opt seccomp=unconfined "
    "--security-opt apparmor=unconfined), or pass --no-jail to run the agent unconfined (unsafe for training: "
    "its shell can read the environment's tasks and solutions; docs/harnesses.md)."
)


class JailUnavailable(RuntimeError):
    """bubblewrap is missing or cannot build the jail here; the message says why and how to go on."""


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.expanduser(os.fspath(path)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths not below another of them, sorted."""
    ordered = sorted(set(paths))
    return [p for p in ordered if not any(o != p and _under(p, o) for o in ordered)]


def _module_paths(top: str) -> set[str]:
    """Where the top-level module ``top`` would be imported from (its package directories or its
    file), found without importing it."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return set()
    if spec is None:
        return set()
    if spec.submodule_search_locations:
        return {_real(p) for p in spec.submodule_search_locations if os.path.exists(p)}
    if spec.origin and os.path.isfile(spec.origin):
        return {_real(spec.origin)}
    return set()


def _distribution_paths(dist: importlib.metadata.Distribution) -> set[str]:
    """What a distribution installed at the top of its site-packages directory, its metadata
    included (its description is the project's README, examples and all), path files and
    editable finders aside (they hold paths only), and the local project it was installed from."""
    out: set[str] = set()
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        direct = {}
    url = str(direct.get("url", ""))
    if url.startswith("file://"):
        source = _real(unquote(urlparse(url).path))
        if os.path.exists(source):
            out.add(source)
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].startswith("__editable__"):
            continue
        if parts[0].endswith((".pth", ".egg-link")):
            continue
        top = str(dist.locate_file(parts[0]))
        if os.path.exists(top):
            out.add(_real(top))
    return out


def _checkouts() -> list[Path]:
    """Repository checkouts the runner runs from: the one holding this package (an editable
    install), and the working directory's (or a parent's) when it has ``envs/*/pyproject.toml``."""
    candidates = [Path(__file__).resolve().parents[4]]
    cwd = Path.cwd().resolve()
    candidates += [cwd, *cwd.parents]
    found: list[Path] = []
    for c in candidates:
        envs = c / "envs"
        if envs.is_dir() and any(envs.glob("*/pyproject.toml")) and c not in found:
            found.append(c)
    return found


def _checkout_secrets(root: Path) -> set[str]:
    """A checkout's environments, caches and history (git objects hold every version of
    ``envs/``), and its other worktrees."""
    out = {str(root / name) for name in ("envs", ".cache", ".git") if (root / name).exists()}
    worktrees = root / ".git" / "worktrees"
    if worktrees.is_dir():
        for gitdir in worktrees.glob("*/gitdir"):
            try:
                tree = Path(gitdir.read_text(encoding="utf-8").strip()).parent
            except OSError:
                continue
            if tree.exists():
                out.add(_real(tree))
    return out


def _caches(environ: Mapping[str, str]) -> set[str]:
    home = Path.home()
    names = [environ.get("XDG_CACHE_HOME") or str(home / ".cache"), str(home / ".local/share/containers")]
    names += [environ[k] for k in ("PIP_CACHE_DIR", "UV_CACHE_DIR", "HF_HOME") if environ.get(k)]
    return {_real(n) for n in names if os.path.exists(n)}


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The paths the jail hides on this machine whatever the run: every installed openenv
    environment (entry point group ``openenv.environments``: the packages its entry points name,
    what its distribution installed, the local project of a local or editable install), the
    repository's ``envs/``, ``.cache``, ``.git`` and other worktrees when the runner runs from a
    checkout, the package and model caches, container image stores, and the task directories
    ``environ`` names (``$HARBOR_TASKS``). Sorted, outermost only."""
    environ = os.environ if environ is None else environ
    found: set[str] = set()
    seen: set[str] = set()
    for ep in importlib.metadata.entry_points(group=ENVIRONMENTS_GROUP):
        top = ep.value.split(":", 1)[0].strip().split(".", 1)[0]
        if top and top != "openenv":  # the runtime itself holds no environment's data
            found |= _module_paths(top)
        dist = ep.dist
        if dist is not None and dist.name not in seen:
            seen.add(dist.name)
            found |= _distribution_paths(dist)
    for root in _checkouts():
        found |= _checkout_secrets(root)
    found |= _caches(environ)
    found |= {s for s in STORES if os.path.exists(s)}
    for name in TASK_VARIABLES:
        found |= {_real(p) for p in environ.get(name, "").split(os.pathsep) if p and os.path.exists(p)}
    found.discard("/")
    return _outermost(found)


def _program_root(program: str) -> str:
    """What must stay readable for ``program`` to run: its npm package tree, its installation
    prefix (``PREFIX/bin/program``), or its directory."""
    real = Path(_real(program))
    parts = real.parts
    if "node_modules" in parts:
        return str(Path(*parts[: parts.index("node_modules") + 1]))
    if real.parent.name == "bin":
        return str(real.parent.parent)
    return str(real.parent)


def _interpreter(program: str) -> str | None:
    """The absolute interpreter of a script's ``#!`` line (``/usr/bin/env`` aside)."""
    try:
        with open(program, "rb") as f:
            head = f.readline(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].decode("utf-8", "replace").split()
    if not words or not os.path.isabs(words[0]) or os.path.basename(words[0]) == "env":
        return None
    return words[0]


def _words(argv: Sequence[str]) -> list[str]:
    """The words of a command line, those of a ``sh -c`` script included."""
    words = list(argv)
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("sh", "bash", "dash") and argv[1] == "-c":
        try:
            words += shlex.split(argv[2], comments=True)
        except ValueError:  # unbalanced quotes: the shell will say so
            pass
    return words


@functools.lru_cache(maxsize=8)
def _bwrap_help(exe: str) -> str:
    try:
        done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


@dataclasses.dataclass(frozen=True)
class Jail:
    """How the runner confines each agent (the module's text says what it hides and why).

    ``hide``: more paths to hide (files or directories that must exist), e.g. a ``$HARBOR_TASKS``
    directory, a token file, a copy of the repository elsewhere. ``pass_env``: names of inherited
    environment variables the agent keeps. ``share_net``: keep the host's network namespace (the
    agent then reaches every port of the host, the environment server's included: serve it with a
    token, docs/harnesses.md). ``bwrap``: the bubblewrap binary (default ``$OPENENV_BWRAP`` or
    ``bwrap`` on ``PATH``).
    """

    hide: tuple[str, ...] = ()
    pass_env: tuple[str, ...] = ()
    share_net: bool = False
    bwrap: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "hide", tuple(os.fspath(p) for p in self.hide))
        object.__setattr__(self, "pass_env", tuple(self.pass_env))

    def describe(self) -> dict[str, object]:
        """The settings as recorded in ``runs.jsonl``'s ``jail`` column."""
        return {"hide": [_real(p) for p in self.hide], "pass_env": list(self.pass_env), "share_net": self.share_net}

    def executable(self) -> str:
        """The bubblewrap binary; :class:`JailUnavailable` when there is none."""
        exe = self.bwrap or bwrap_path()
        if exe is None or not os.access(exe, os.X_OK):
            raise JailUnavailable(MISSING)
        return exe

    def _namespaces(self, exe: str) -> list[str]:
        a = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.share_net:
            a.append("--unshare-net")
        if "--disable-userns" in _bwrap_help(exe):
            a.append("--disable-userns")  # no nested user namespace; mounts are locked regardless
        if os.geteuid() == 0:
            a += ["--cap-drop", "ALL"]  # root keeps its capabilities in the new namespace otherwise
        return [*a, "--die-with-parent"]

    def check(self) -> None:
        """Raise :class:`JailUnavailable` (bubblewrap missing, or it cannot create the jail's
        namespaces here) or ``ValueError`` (a ``hide`` path that does not exist), before any
        session opens: one jail is built and runs the runner's Python."""
        for p in self.hide:
            if not os.path.lexists(os.path.expanduser(p)):
                raise ValueError(f"--hide {p}: no such file or directory")
            if _real(p) == "/":
                raise ValueError("--hide /: the agent cannot run without the system's files")
        exe = self.executable()
        probe = [exe, *self._namespaces(exe), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        probe += ["--", sys.executable, "-I", "-S", "-c", "pass"]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False, env={})
        except (OSError, subprocess.SubprocessError) as e:
            raise JailUnavailable(REFUSED.format(why=str(e))) from e
        if done.returncode != 0:
            why = (done.stderr.strip() or f"exit status {done.returncode}").splitlines()[-1]
            raise JailUnavailable(REFUSED.format(why=why))

    def hidden(self, run_dir: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> list[str]:
        """Every path hidden from an agent of a run writing to ``run_dir``: the
        :func:`environment_secrets`, the run directory, and ``hide``."""
        return _outermost([*environment_secrets(environ), _real(run_dir), *(_real(p) for p in self.hide)])

    def environment(
        self, launch_env: Mapping[str, str], home: str | os.PathLike[str], inherited: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The agent's environment: what its harness set (a value that differs from the
        inherited one), the kept names (``PATH``, locale, ...), ``pass_env``; ``HOME`` is its
        private ``home`` unless the harness chose one, ``TMPDIR`` the jail's ``/tmp``."""
        inherited = os.environ if inherited is None else inherited
        out = {
            k: v
            for k, v in launch_env.items()
            if k in KEEP_ENV or k.startswith(KEEP_ENV_PREFIXES) or k in self.pass_env or inherited.get(k) != v
        }
        for k in self.pass_env:
            if k in inherited:
                out.setdefault(k, inherited[k])
        if "HOME" not in out:
            out["HOME"] = os.fspath(home)
        out.setdefault("TMPDIR", "/tmp")
        return out

    def mounts(
        self,
        hidden: Sequence[str],
        needed: Sequence[str],
        writable: Sequence[str],
        readonly: Sequence[tuple[str, str]] = (),
    ) -> list[str]:
        """bubblewrap's file system arguments: the host read-only, ``FRESH`` empty and writable,
        ``hidden`` covered, ``needed`` mounted back read-only where something covers it, then
        ``readonly`` (``(source, destination)`` pairs) and ``writable`` (the episode's own
        directories) on top."""
        a = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        fresh = [d for d in FRESH if os.path.isdir(d) and not os.path.islink(d)]
        covers = [*fresh, *(h for h in _outermost(hidden) if not any(_under(h, f) for f in fresh))]
        covers = sorted(set(covers), key=lambda p: (p.count("/"), p))
        remount: list[str] = []

        def cover(path: str) -> None:
            if os.path.isdir(path) and not os.path.islink(path):
                a.extend(["--tmpfs", path])
                remount.append(path)
            elif os.path.lexists(path):
                a.extend(["--ro-bind", "/dev/null", path])

        for c in covers:
            if c in fresh:
                a.extend(["--tmpfs", c])
            else:
                cover(c)
        back = _outermost(_real(n) for n in needed if os.path.exists(n) and any(_under(_real(n), c) for c in covers))
        for b in back:
            a.extend(["--ro-bind", b, b])
        for h in _outermost(h for h in hidden if any(h != b and _under(h, b) for b in back)):
            cover(h)
        for src, dest in readonly:
            a.extend(["--ro-bind", src, dest])
        for p in writable:
            a.extend(["--bind", p, p])
        for p in remount:  # last: the directories above were made inside these covers
            a.extend(["--remount-ro", p])
        return a

    def wrap(
        self,
        launch: AgentLaunch,
        ctx: AgentContext,
        *,
        hidden: Sequence[str],
        port: int | None = None,
        socket_path: str | None = None,
    ) -> AgentLaunch:
        """``launch`` inside the jail, with ``hidden`` (:meth:`hidden`) covered. Without
        ``share_net``, ``port`` is the runner's server's loopback port and ``socket_path`` the UNIX
        socket it also serves on: the jail's own ``127.0.0.1:port`` leads there."""
        exe = self.executable()
        if not self.share_net and (port is None or socket_path is None):
            raise ValueError("a jail with its own network needs the runner's port and UNIX socket")
        home = ctx.home / "home"
        home.mkdir(parents=True, exist_ok=True)
        needed = [sys.prefix, sys.base_prefix, str(Path(_real(sys.executable)).parent), str(JAIL_INIT.parent)]
        program = launch.argv[0]
        if os.path.isabs(program):
            needed.append(_program_root(program))
            interpreter = _interpreter(program)
            if interpreter:
                needed.append(_program_root(interpreter))
        # Files the agent's own command line names (a command agent's script, a configuration
        # file) stay readable where only a fresh directory covers them; never from a hidden path.
        for word in _words(launch.argv):
            real = _real(word)
            if not os.path.isabs(word) or real in ("/", *FRESH) or not os.path.exists(real):
                continue
            if not any(_under(real, h) or _under(h, real) for h in hidden):
                needed.append(real)
        readonly = [(_real(ctx.bin_dir), _real(ctx.bin_dir))]
        inner = list(launch.argv)
        if not self.share_net:
            assert socket_path is not None
            readonly.append((socket_path, SOCKET_IN_JAIL))
            inner = [sys.executable, "-I", "-S", str(JAIL_INIT), str(port), SOCKET_IN_JAIL, "--", *inner]
        argv = [exe, *self._namespaces(exe)]
        argv += self.mounts(hidden, needed, [_real(ctx.workspace), _real(ctx.home)], readonly)
        argv += ["--chdir", _real(launch.cwd), "--", *inner]
        return AgentLaunch(argv, self.environment(launch.env, home), launch.cwd)


DEFAULT_JAIL = Jail()
"""The runner's default: every agent jailed, nothing more hidden, nothing passed through."""
