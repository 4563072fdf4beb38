"""A Harbor task's environment in an :class:`openenv.sandbox.Sandbox`: its starting state, the
agent's commands, the oracle, and the verifier.

The workspace (the sandbox's ``/workspace``) is seen at the task's WORKDIR (``/app`` unless the
Dockerfile says otherwise), where the agent's commands start. ``/tests``, ``/solution`` and
``/logs`` are links into ``/dev/shm/.harbor``: the sandbox empties it after every call, so the
tests and the solution exist only during the one call that grades (or plays the oracle), and
nothing the agent left there survives until then.

Grading (:meth:`TaskBox.verify`, RFC 0015) takes three steps, each a call of its own after every
process of the agent's calls has ended:

1. **A clean copy.** The workspace is read out (:func:`openenv.sandbox.get_files`, with every
   file's and directory's mode and time), cleaned (:func:`openenv.sandbox.clean_copy`: git
   configuration reduced to keys that run no program, hooks and alternates removed), the
   workspace emptied and the copy written back: regular files and directories with their modes
   and times, and the symbolic links that stay inside the workspace (no ``..``, absolute only
   below the working directory, none in a git directory or at a git configuration's path). FIFOs,
   sockets and devices are not copied. (Git directories are found more widely than
   ``clean_copy`` finds them: a linked worktree's common directory, which has no HEAD, too.)
2. **The tests.** The grader (:data:`GRADER`, run by the sandbox's interpreter with nothing of
   the workspace on its ``sys.path``) receives the tests as a tar on its standard input, unpacks
   them into ``/tests``, makes itself undumpable and a child subreaper, and runs ``bash
   /tests/test.sh`` (output to ``/logs/verifier/test-stdout.txt``) with the task's environment
   and :data:`openenv.sandbox.VERIFIER_ENV`, under a further Landlock layer: ``/tests`` is
   unwritable and the grader cannot be signalled. ``$OPENENV_UNTRUSTED`` names a command
   (:data:`UNTRUSTED`) the tests run the agent's programs with: a Landlock layer below the tests'
   own, which can read neither ``/tests`` nor ``/solution``, write nothing of ``/logs``, and
   signal none of the tests' processes.
3. **The verdict** (:func:`judge`): it counts only when ``test.sh`` ran to completion: it exited
   with status 0, was not killed by a signal, did not run out of time, and no process of the
   tests' outlived its parent (a process left behind could rewrite the reward after the tests
   wrote it). Then exactly what :func:`parse_rewards` says; anything else is reward 0, with the
   reason in the verdict's ``error``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import posixpath
import secrets
import shlex
import tarfile
from collections.abc import Mapping
from typing import Any

from harbor_env.task import HarborTask
from openenv.sandbox import (
    VERIFIER_ENV,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    WorkspaceFiles,
    clean_copy,
    clean_git_config,
    get_files,
)

__all__ = ["GRADER", "UNTRUSTED", "TaskBox", "Verdict", "judge", "parse_rewards"]

SHM = "/dev/shm/.harbor"
LINKS = {"/tests": f"{SHM}/tests", "/solution": f"{SHM}/solution", "/logs": f"{SHM}/logs"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_REWARD_FILE = 64 * 1024
#: The variable of the tests' environment naming :data:`UNTRUSTED` (see the module's text).
UNTRUSTED_ENV = "OPENENV_UNTRUSTED"

#: The first lines of every program of ours that runs in the sandbox: a call's ``sys.path`` starts
#: with the workspace, where the agent may have left a ``tarfile.py`` or ``subprocess.py``; none
#: of it is imported by our code.
_CLEAN_PATH = "import sys\nsys.path[:] = [p for p in sys.path if p and not p.startswith(('/workspace', '.'))]\n"

#: Unpacks a tar (standard input, after a JSON header line) into a directory of the workspace.
UNPACK = (
    _CLEAN_PATH
    + r"""
import io, json, os, tarfile
head = json.loads(sys.stdin.buffer.readline())
data = sys.stdin.buffer.read()
dest, into_dir = head["dest"], head["into_dir"]
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    members = tar.getmembers()
    if not into_dir and len(members) == 1 and members[0].isfile() and not os.path.isdir(dest):
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        with open(dest, "wb") as f:
            f.write(tar.extractfile(members[0]).read())
        os.chmod(dest, members[0].mode & 0o777)
    else:
        os.makedirs(dest, exist_ok=True)
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
"""
)

#: Before the workspace is read out: every entry's kind, mode and modification time (JSON on
#: stdout), and the owner's read (and search) permission on what it lacks, so that nothing the
#: agent made unreadable is left out of the copy (its mode is restored in the copy).
PREPARE = (
    _CLEAN_PATH
    + r"""
import json, os, stat
try:  # the workspace itself: listable whatever the agent did to it (it is not copied)
    os.chmod(".", stat.S_IMODE(os.stat(".").st_mode) | 0o700)
except OSError:
    pass
out = {}
todo = ["."]
while todo:
    d = todo.pop()
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for name in names:
        path = os.path.join(d, name)
        rel = path[2:]
        try:
            st = os.lstat(path)
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            kind = "dir"
            if mode & 0o700 != 0o700:
                os.chmod(path, mode | 0o700)
            todo.append(path)
        elif stat.S_ISREG(st.st_mode):
            kind = "file"
            if not mode & 0o400:
                os.chmod(path, mode | 0o400)
        elif stat.S_ISLNK(st.st_mode):
            kind = "link"
        else:
            kind = "special"
        out[rel] = [kind, mode, st.st_mtime_ns]
sys.stdout.write(json.dumps(out))
"""
)

#: Writes the clean copy into the emptied workspace: a JSON header line (modes and times), then
#: a tar of regular files, directories and symbolic links; modes and times are set last,
#: directories deepest first.
RESTORE = (
    _CLEAN_PATH
    + r"""
import io, json, os, tarfile
head = json.loads(sys.stdin.buffer.readline())
data = sys.stdin.buffer.read()
meta = head["meta"]
dirs = []
with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
    for m in tar.getmembers():
        name = m.name
        if name.startswith("/") or ".." in name.split("/"):
            continue
        parent = os.path.dirname(name)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if m.isdir():
            os.makedirs(name, exist_ok=True)
            dirs.append(name)
        elif m.isfile():
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(tar.extractfile(m).read())
        elif m.issym():
            os.symlink(m.linkname, name)
        else:
            continue
        kind, mode, mtime = meta.get(name, [None, None, None])
        if m.isfile() and mode is not None:
            os.chmod(name, mode)
        if mtime is not None and not m.isdir():
            os.utime(name, ns=(mtime, mtime), follow_symlinks=False)
for name in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
    kind, mode, mtime = meta.get(name, [None, None, None])
    if mtime is not None:
        os.utime(name, ns=(mtime, mtime))
    if mode is not None:
        os.chmod(name, mode)
"""
)

#: ``$OPENENV_UNTRUSTED PROGRAM ARGS...``: runs PROGRAM with a lesser identity than the tests'
#: (written by the grader into ``/dev/shm/.harbor/bin``, which the tests cannot write): a
#: Landlock layer under which it reads the system, the workspace and ``/tmp`` (not ``/tests``,
#: ``/solution``, ``/logs`` or ``/dev/shm``), writes only the workspace and ``/tmp``, and can
#: signal no process outside its own domain (the tests', the grader's). Then ``exec``s PROGRAM:
#: same process, same environment, same working directory.
UNTRUSTED = r"""#!@PYTHON@ -I
import os, sys
sys.dont_write_bytecode = True
sys.path[:] = ["/.openenv"] + [p for p in sys.path if p and not p.startswith(("/workspace", "."))]
import _confine
if len(sys.argv) < 2:
    sys.stderr.write("usage: $OPENENV_UNTRUSTED PROGRAM [ARGS...]\n")
    sys.exit(2)
hidden = ("/dev", "/box", "/tmp", "/workspace", "/tests", "/solution", "/logs")
read = []
for name in sorted(os.listdir("/")):
    path = "/" + name
    real = os.path.realpath(path)
    if path in hidden or any(real == h or real.startswith(h + "/") for h in ("/dev", "/box")):
        continue
    read.append(path)
read += [d for d in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom") if os.path.exists(d)]
if _confine.landlock(read, ["/workspace", "/tmp", "/dev/null"]) is None and @REQUIRE@:
    sys.stderr.write("$OPENENV_UNTRUSTED: this kernel has no Landlock; refusing to run the program\n")
    os._exit(126)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as e:
    sys.stderr.write(f"$OPENENV_UNTRUSTED: cannot run {sys.argv[1]!r}: {e}\n")
    os._exit(127)
"""

#: The grader (see the module's text). Runs as the sandbox call's first process.
GRADER = (
    _CLEAN_PATH
    + r"""
import io, json, os, signal, stat, subprocess, tarfile, time
sys.path.insert(0, "/.openenv")
import _confine
_confine.not_dumpable()
_confine.libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: an orphan of the tests' becomes our child
head = json.loads(sys.stdin.buffer.readline())
data = sys.stdin.buffer.read()
shm = head["shm"]
logs = shm + "/logs"
for d in (shm + "/tests", shm + "/solution", shm + "/bin", logs + "/verifier", logs + "/agent", logs + "/artifacts"):
    os.makedirs(d, exist_ok=True)
target = shm + "/" + head["unpack"]
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    tar.extractall(target, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
untrusted = shm + "/bin/untrusted"
with open(untrusted, "w") as f:
    f.write(head["untrusted"].replace("@PYTHON@", sys.executable).replace("@REQUIRE@", str(head["require_landlock"])))
os.chmod(untrusted, 0o555)
def confine():
    os.setsid()
    layer = _confine.landlock(["/"], head["write"])
    if layer is None and head["require_landlock"]:
        os._exit(126)
log = open(logs + "/verifier/" + head["log"], "wb")
env = {"PATH": head["path"], "HOME": head["home"], "LANG": "C.UTF-8", "TMPDIR": "/tmp", **head["env"]}
env[head["untrusted_env"]] = untrusted
p = subprocess.Popen(["bash", "-c", 'cd -- "$1" 2>/dev/null; shift; exec "$@"', "bash", head["cwd"], *head["argv"]],
                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=confine,
                     close_fds=True)
deadline = time.monotonic() + head["timeout"]
status, orphans = None, 0
while status is None:
    try:
        pid, st = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == p.pid:
        status = st
    elif pid:
        orphans += 1  # a process that outlived its parent and ended before the script did
    elif time.monotonic() >= deadline:
        break
    else:
        time.sleep(0.01)
timed_out = status is None
me = str(os.getpid())
for pid in os.listdir("/proc"):  # processes the script left behind (or whose parent it outlived)
    try:
        with open("/proc/" + pid + "/stat") as f:
            ppid = f.read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        continue
    if ppid == me and pid.isdigit() and int(pid) != p.pid:
        orphans += 1
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
end = time.monotonic() + 5
while time.monotonic() < end:
    try:
        pid, st = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        time.sleep(0.01)
p.returncode = 0  # reaped above: Popen must not wait for it again
log.close()
code = None
if status is not None:
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
def entry(dir_fd, name):
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "directory"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symbolic link"
    else:
        kind = "special file"
    out = {"kind": kind}
    if kind == "file":
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        try:
            raw = os.read(fd, head["max"] + 1)
        finally:
            os.close(fd)
        out["too_long"] = len(raw) > head["max"]
        out["text"] = raw[: head["max"]].decode("utf-8", "replace")
    return out
files, verifier_dir = {}, "ok"
try:
    vfd = os.open(logs + "/verifier", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
except OSError as e:
    verifier_dir = "not a directory (" + e.strerror + ")"
else:
    try:
        for name in ("reward.json", "reward.txt", head["log"]):
            files[name] = entry(vfd, name)
    finally:
        os.close(vfd)
logged = files.pop(head["log"], None) or {}
out = {"exit_code": code, "timed_out": timed_out, "orphans": orphans, "verifier_dir": verifier_dir,
       "reward_json": files.get("reward.json"), "reward_txt": files.get("reward.txt"),
       "log": (logged.get("text") or "")[-4000:]}
sys.stdout.write("\n" + head["nonce"] + json.dumps(out) + "\n")
"""
)


@dataclasses.dataclass
class Verdict:
    """What the verifier concluded: the reward, the named rewards, why it is what it is
    (``error``: None when the tests' own verdict counted), and the run's detail (exit code,
    whether it ran out of time, the tail of its output; for rich feedback only)."""

    reward: float
    rewards: dict[str, float]
    error: str | None
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    def rich(self) -> dict[str, Any]:
        """Everything: for rich feedback (and ``harbor-env check``)."""
        return {"reward": self.reward, "rewards": self.rewards, "error": self.error, **self.detail}

    def strict(self) -> dict[str, Any]:
        """The reward and nothing else: what an agent in a strict episode may see."""
        return {"reward": self.reward}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _parse_json(text: str) -> tuple[dict[str, float], str | None]:
    try:
        value = json.loads(text)
    except ValueError as e:
        return {}, f"reward.json is not JSON: {e}"
    items = value if isinstance(value, dict) else {"reward": value}
    out: dict[str, float] = {}
    for k, v in items.items():
        n = _number(v)
        if n is None:
            return {}, f"reward.json: {k!r} is {v!r}, not a finite number"
        out[str(k)] = n
    if not out:
        return {}, "reward.json is empty"
    if "reward" not in out:
        out = {"reward": sum(out.values()) / len(out), **out}
    return out, None


def _parse_txt(text: str) -> tuple[float | None, str | None]:
    try:
        v = float(text.strip())
    except ValueError:
        return None, f"reward.txt is not a number: {text.strip()[:80]!r}"
    if not math.isfinite(v):
        return None, f"reward.txt: {v!r} is not finite"
    return v, None


def parse_rewards(
    reward_json: Mapping[str, Any] | None, reward_txt: Mapping[str, Any] | None
) -> tuple[dict[str, float], str | None]:
    """The tests' reward from ``/logs/verifier`` (each file as the grader saw it: None when
    absent, else ``{"kind": "file" | "directory" | ..., "text": ...}``). Returns the named
    rewards (``reward`` the main one) or an error (then the reward is 0):

    * neither file exists: an error;
    * either path exists but is not a regular file (a directory, a symbolic link, a FIFO): an
      error; the tests' own write makes a regular file, so anything else is someone else's;
    * a file is not a finite number (``reward.txt``) or an object of finite numbers (or one
      number; ``reward.json``, whose ``reward`` is the main one, else the mean of its values),
      or is longer than 64 KiB: an error;
    * both files exist: the *lower* of the two main rewards (the named rewards are
      ``reward.json``'s). Harbor writes one of the two; a second one is either the tests' own,
      saying the same, or not the tests' at all, and a file the tests did not write must never
      raise their verdict: the lower one is at most what the tests wrote;
    * the main reward must lie in [0, 1] (the environment's reward range): outside it, an error
      (never clipped, which would turn a forged 5 into a 1).
    """
    found = {"reward.json": reward_json, "reward.txt": reward_txt}
    present = {k: v for k, v in found.items() if v is not None}
    if not present:
        return {}, "the verifier wrote no reward (/logs/verifier/reward.json or reward.txt)"
    for name, f in present.items():
        if f.get("kind") != "file":
            return {}, f"/logs/verifier/{name} is a {f.get('kind')}, not a regular file"
        if f.get("too_long"):
            return {}, f"/logs/verifier/{name} is longer than {MAX_REWARD_FILE} bytes"
    rewards: dict[str, float] = {}
    mains = []
    if reward_json is not None:
        rewards, error = _parse_json(str(reward_json.get("text", "")))
        if error:
            return {}, error
        mains.append(rewards["reward"])
    if reward_txt is not None:
        v, error = _parse_txt(str(reward_txt.get("text", "")))
        if error or v is None:
            return {}, error
        mains.append(v)
        rewards.setdefault("reward", v)
    main = min(mains)
    if not 0.0 <= main <= 1.0:
        return {}, f"the reward {main:g} is outside [0, 1]"
    rewards["reward"] = main
    return rewards, None


def judge(raw: Mapping[str, Any], timeout_s: float) -> Verdict:
    """The verdict of one run of the tests (the grader's report, :data:`GRADER`): the tests'
    reward (:func:`parse_rewards`) when ``test.sh`` ran to completion, else 0 with the reason."""
    detail = {
        "exit_code": raw.get("exit_code"),
        "timed_out": bool(raw.get("timed_out")),
        "log": raw.get("log", ""),
    }
    if "error" in raw:
        return Verdict(0.0, {}, str(raw["error"]), detail)
    why = []
    code = raw.get("exit_code")
    if raw.get("timed_out"):
        why.append(f"the verifier ran out of time ({timeout_s:g} s)")
    elif code is None:
        why.append("test.sh did not finish")
    elif code < 0:
        why.append(f"test.sh was killed by signal {-code}")
    elif code != 0:
        why.append(f"test.sh exited with status {code}")
    if raw.get("orphans"):
        why.append(
            f"{raw['orphans']} process(es) of the tests outlived their parent (one could rewrite the reward after the "
            "tests wrote it: test.sh must wait for every process it starts)"
        )
    if raw.get("verifier_dir", "ok") != "ok":
        why.append(f"/logs/verifier is {raw['verifier_dir']}")
    rewards, error = parse_rewards(raw.get("reward_json"), raw.get("reward_txt"))
    if error:
        why.append(error)
    if why:
        return Verdict(0.0, {}, "; ".join(why) + ": the tests' verdict does not count", detail)
    return Verdict(rewards["reward"], rewards, None, detail)


def _safe_link(path: str, target: str, workdir: str, git_dirs: set[str]) -> bool:
    """A symbolic link of the agent's that the copy may keep: it cannot lead out of the workspace
    (no ``..``, an absolute target below the working directory) and git reads no configuration
    through it (none inside a git directory, none at a git configuration's path)."""
    if not target or "\x00" in target or ".." in target.split("/"):
        return False
    if target.startswith("/"):
        roots = {workdir.rstrip("/"), "/workspace"}
        if not any(target == r or target.startswith(r + "/") for r in roots):
            return False
    parts = path.split("/")
    if ".git" in parts or parts[-1] in (".gitconfig", ".gitmodules") or path.endswith(".config/git/config"):
        return False
    return not any(path.startswith(g + "/") or g == "" for g in git_dirs)


def _git_dirs(ws: WorkspaceFiles) -> set[str]:
    """Directories of the copy that git may read as (part of) a git directory: a HEAD beside
    ``objects/`` or ``refs/`` (what :func:`openenv.sandbox.clean_copy` finds), and also ``objects/``
    beside ``refs/`` without a HEAD, or a HEAD beside a ``commondir`` file: a linked worktree's git
    directory holds HEAD and ``commondir`` only, and the common directory that names holds
    objects/, refs/ and the ``config`` git reads, but needs no HEAD."""
    names = set(ws.files) | set(ws.dirs)

    def has(d: str, name: str) -> bool:
        return (f"{d}/{name}" if d else name) in names

    candidates = {posixpath.dirname(p) for p in names if posixpath.basename(p) in ("HEAD", "objects", "refs")}
    return {
        d
        for d in candidates
        if (has(d, "HEAD") and (has(d, "objects") or has(d, "refs") or has(d, "commondir")))
        or (has(d, "objects") and has(d, "refs"))
    }


def _clean_git_dirs(ws: WorkspaceFiles) -> WorkspaceFiles:
    """What :func:`openenv.sandbox.clean_copy` does to a git directory, done to every directory
    :func:`_git_dirs` finds too: configuration cleaned, hooks and alternates removed."""
    git_dirs = _git_dirs(ws)
    files = dict(ws.files)
    for path in list(files):
        for g in git_dirs:
            prefix = f"{g}/" if g else ""
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            if rel.startswith("hooks/") or rel == "objects/info/alternates":
                del files[path]
                break
            worktree_config = rel.startswith("worktrees/") and rel.endswith("/config.worktree")
            if rel in ("config", "config.worktree") or worktree_config:
                files[path] = clean_git_config(files[path].decode("utf-8", "replace")).encode()
    modes = {p: m for p, m in ws.modes.items() if p in files}
    return WorkspaceFiles(files, modes, list(ws.dirs), dict(ws.skipped))


class TaskBox:
    """One session's sandbox for Harbor tasks (its links follow the current task's WORKDIR)."""

    def __init__(self, limits: Limits, secrets_: list[str], allow_missing: tuple[str, ...] = ()) -> None:
        self.limits = limits
        self.secrets = secrets_
        self.allow_missing = allow_missing
        self.box: Sandbox | None = None
        self.workdir = ""
        self.task: HarborTask | None = None

    def close(self) -> None:
        if self.box is not None:
            self.box.close()
            self.box = None

    @property
    def isolation(self) -> list[str]:
        return list(self.box.isolation) if self.box is not None else []

    def _sandbox(self, workdir: str) -> Sandbox:
        if self.box is None or self.workdir != workdir:
            self.close()
            links = dict(LINKS)
            if workdir != "/workspace":
                links[workdir] = "/workspace"
            env = {"PATH": PATH, "HOME": workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
            self.box = Sandbox(
                self.limits, secrets=self.secrets, links=links, env=env, allow_missing=self.allow_missing or None
            )
            self.workdir = workdir
        return self.box

    def start(self, task: HarborTask) -> list[str]:
        """A new episode of ``task``: an empty workspace, then the Dockerfile's steps. Returns
        problems (a RUN step that failed), empty when the starting state is complete."""
        box = self._sandbox(task.build.workdir)
        box.start()
        box.clear()
        self.task = task
        problems = []
        for step in task.build.steps:
            if step[0] == "copy":
                _, dest, data, into_dir = step
                head = json.dumps({"dest": dest, "into_dir": into_dir}).encode() + b"\n"
                r = box.run(UNPACK, stdin=head + data, limits=self._limits(120))
                if r.exit_code != 0:
                    problems.append(f"COPY to {dest} failed: {r.stderr[-1500:]}")
            elif step[0] == "mkdir":
                box.exec(["mkdir", "-p", step[1]], limits=self._limits(30))
            elif step[0] == "run":
                _, cmd, cwd, env = step
                r = self.shell(cmd, 600, cwd=cwd, env=env)
                if r.exit_code != 0:
                    problems.append(f"RUN {cmd[:200]} failed (exit {r.exit_code}): {(r.stdout + r.stderr)[-1500:]}")
            if problems:
                break
        return problems

    def _limits(self, wall_s: float) -> Limits:
        wall = max(1.0, float(wall_s))
        return dataclasses.replace(self.limits, wall_s=wall, cpu_s=max(1, math.ceil(wall)))

    def _env(self, extra: Mapping[str, str] | None = None) -> list[str]:
        assert self.task is not None
        env = {**self.task.build.env, **(extra or {})}
        return [f"{k}={v}" for k, v in env.items()]

    def shell(
        self, command: str, wall_s: float, *, cwd: str | None = None, env: Mapping[str, str] | None = None
    ) -> RunResult:
        """``bash -c COMMAND`` in the task's WORKDIR (or ``cwd``), with the task's ENV."""
        assert self.box is not None and self.task is not None
        argv = ["env", *self._env(env), "bash", "-c", 'cd -- "$1" || exit 1; eval "$2"', "bash"]
        argv += [cwd or self.task.build.workdir, command]
        return self.box.exec(argv, limits=self._limits(wall_s))

    def python(self, code: str, wall_s: float, stdin: bytes = b"") -> RunResult:
        assert self.box is not None
        return self.box.run(code, stdin=stdin, limits=self._limits(wall_s))

    def _graded_call(
        self, argv: list[str], unpack: str, data: bytes, env: Mapping[str, str], timeout: float, log: str
    ) -> dict[str, Any]:
        assert self.box is not None and self.task is not None
        nonce = secrets.token_hex(16)
        head = {
            "shm": SHM,
            "unpack": unpack,
            "argv": argv,
            "cwd": self.task.build.workdir,
            "env": {**self.task.build.env, **env},
            "path": self.task.build.env.get("PATH", PATH),
            "home": self.task.build.workdir,
            "timeout": timeout,
            # What the tests may write: the workspace, /tmp and /logs; never /tests, /solution or
            # the untrusted runner (all in /dev/shm/.harbor, of which only logs/ is granted).
            "write": ["/workspace", "/tmp", "/dev/null", f"{SHM}/logs"],
            "require_landlock": "landlock" not in self.allow_missing,
            "untrusted": UNTRUSTED,
            "untrusted_env": UNTRUSTED_ENV,
            "log": log,
            "max": MAX_REWARD_FILE,
            "nonce": nonce,
        }
        r = self.box.run(GRADER, stdin=json.dumps(head).encode() + b"\n" + data, limits=self._limits(timeout + 30))
        for line in reversed(r.stdout.splitlines()):
            if line.startswith(nonce):
                out: dict[str, Any] = json.loads(line[len(nonce) :])
                return out
        return {"error": f"the grader did not answer (exit {r.exit_code}, timed out {r.timed_out}): {r.stderr[-800:]}"}

    def clean_workspace(self) -> list[str]:
        """Replace the workspace with a clean copy of itself (see the module's text); returns
        what was not copied (links that could lead out, FIFOs, sockets, devices).

        Raises:
            SandboxError: the workspace could not be read or written back.
        """
        assert self.box is not None and self.task is not None
        r = self.box.run(PREPARE, limits=self._limits(120))
        if r.exit_code != 0:
            raise SandboxError(f"could not list the workspace (exit {r.exit_code}): {r.stderr[-500:]}")
        try:
            meta: dict[str, list[Any]] = json.loads(r.stdout)
        except ValueError as e:
            raise SandboxError(f"the workspace's listing is not JSON: {e}") from None
        ws = _clean_git_dirs(clean_copy(get_files(self.box)))
        git_dirs = _git_dirs(ws)
        notes = []
        links = {}
        for path, what in sorted(ws.skipped.items()):
            target = what[len("symlink -> ") :] if what.startswith("symlink -> ") else None
            if target is not None and _safe_link(path, target, self.task.build.workdir, git_dirs):
                links[path] = target
            else:
                notes.append(f"{path}: {what}, not copied")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
            for d in sorted(ws.dirs):
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            for path, content in sorted(ws.files.items()):
                info = tarfile.TarInfo(path)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            for path, target in links.items():
                info = tarfile.TarInfo(path)
                info.type = tarfile.SYMTYPE
                info.linkname = target
                tar.addfile(info)
        keep = set(ws.files) | set(ws.dirs) | set(links)
        head = json.dumps({"meta": {p: m for p, m in meta.items() if p in keep}}).encode() + b"\n"
        self.box.clear()
        r = self.box.run(RESTORE, stdin=head + buf.getvalue(), limits=self._limits(120))
        if r.exit_code != 0:
            raise SandboxError(f"could not write the workspace's copy back (exit {r.exit_code}): {r.stderr[-500:]}")
        return notes

    def verify(self) -> Verdict:
        """Run the task's tests on a clean copy of the workspace as it is now (see the module's
        text)."""
        assert self.task is not None
        task = self.task
        self._sandbox(task.build.workdir)
        try:
            notes = self.clean_workspace()
        except (SandboxError, ValueError) as e:
            return Verdict(0.0, {}, f"the workspace could not be copied for grading: {e}", {})
        raw = self._graded_call(
            ["bash", "/tests/test.sh"], "tests", task.tests_tar, {**task.verifier_env, **VERIFIER_ENV},
            task.verifier_timeout_s, "test-stdout.txt",
        )  # fmt: skip
        verdict = judge(raw, task.verifier_timeout_s)
        if notes:
            verdict.detail["workspace"] = notes[:20]
        return verdict

    def oracle(self) -> dict[str, Any]:
        """Play the task's reference solution (``bash /solution/solve.sh``) on the workspace."""
        assert self.task is not None
        if self.task.solution_tar is None:
            raise ValueError(f"task {self.task.id} has no solution/solve.sh")
        return self._graded_call(
            ["bash", "/solution/solve.sh"], "solution", self.task.solution_tar, self.task.solution_env,
            self.task.agent_timeout_s, "solve-stdout.txt",
        )  # fmt: skip


def quote(s: str) -> str:
    return shlex.quote(s)
