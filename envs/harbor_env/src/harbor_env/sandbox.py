"""A Harbor task's environment in an :class:`openenv.sandbox.Sandbox`: its starting state, the
agent's commands, the oracle, and the verifier.

The workspace (the sandbox's ``/workspace``) is seen at the task's WORKDIR (``/app`` unless the
Dockerfile says otherwise), where the agent's commands start. ``/tests``, ``/solution`` and
``/logs`` are links into ``/dev/shm/.harbor`` and ``/tmp/.harbor``: the sandbox empties both
after every call, so the tests and the solution exist only during the one call that grades (or
plays the oracle), and nothing the agent left there survives until then.

Grading (:meth:`TaskBox.verify`) is a call of its own, after every process of the agent's calls
has ended: the grader (:data:`GRADER`, run by the sandbox's interpreter) receives the tests as a
tar on its standard input, unpacks them into ``/tests``, makes itself undumpable, and
runs ``bash /tests/test.sh`` (output to ``/logs/verifier/test-stdout.txt``) under a further
Landlock layer that leaves ``/tests`` unwritable and the grader unsignallable; when the script
ends (or its time is up) it kills every other process of the sandbox, then reads
``/logs/verifier/reward.json`` or ``reward.txt`` (no symlinks followed) and prints the verdict
after a nonce that only it has read.
"""

from __future__ import annotations

import json
import math
import secrets
import shlex
from collections.abc import Mapping
from typing import Any

from harbor_env.task import HarborTask
from openenv.sandbox import Limits, RunResult, Sandbox

__all__ = ["GRADER", "TaskBox", "Verdict", "parse_rewards"]

SHM = "/dev/shm/.harbor"
TMP = "/tmp/.harbor"
LINKS = {"/tests": f"{SHM}/tests", "/solution": f"{SHM}/solution", "/logs": f"{TMP}/logs"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_REWARD_FILE = 64 * 1024

#: Unpacks a tar (standard input, after a JSON header line) into a directory of the workspace.
UNPACK = r"""
import io, json, os, sys, tarfile
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

#: The grader (see the module's text). Runs as the sandbox call's first process.
GRADER = r"""
import io, json, os, signal, stat, subprocess, sys, tarfile
sys.path.insert(0, "/.openenv")
import _confine
_confine.not_dumpable()
head = json.loads(sys.stdin.buffer.readline())
data = sys.stdin.buffer.read()
shm, tmp = head["shm"], head["tmp"]
for d in (shm + "/tests", shm + "/solution", tmp + "/logs/verifier", tmp + "/logs/agent", tmp + "/logs/artifacts"):
    os.makedirs(d, exist_ok=True)
target = shm + "/" + head["unpack"]
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    tar.extractall(target, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
def confine():
    os.setsid()
    layer = _confine.landlock(["/"], head["write"])
    if layer is None and head["require_landlock"]:
        os._exit(126)
log = open(tmp + "/logs/verifier/" + head["log"], "wb")
env = {"PATH": head["path"], "HOME": head["home"], "LANG": "C.UTF-8", "TMPDIR": "/tmp", **head["env"]}
p = subprocess.Popen(["bash", "-c", 'cd -- "$1" 2>/dev/null; shift; exec "$@"', "bash", head["cwd"], *head["argv"]],
                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=confine,
                     close_fds=True)
timed_out = False
try:
    code = p.wait(timeout=head["timeout"])
except subprocess.TimeoutExpired:
    timed_out, code = True, None
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
try:
    p.wait(timeout=5)
except Exception:
    pass
log.close()
def read(name):
    path = tmp + "/logs/verifier/" + name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, head["max"]).decode("utf-8", "replace")
    finally:
        os.close(fd)
out = {"exit_code": code, "timed_out": timed_out, "reward_json": read("reward.json"),
       "reward_txt": read("reward.txt"), "log": (read(head["log"]) or "")[-4000:]}
sys.stdout.write("\n" + head["nonce"] + json.dumps(out) + "\n")
"""


class Verdict:
    """What the verifier concluded: the reward, the named rewards, and why."""

    def __init__(self, reward: float, rewards: Mapping[str, float], error: str | None, raw: Mapping[str, Any]) -> None:
        self.reward = reward
        self.rewards = dict(rewards)
        self.error = error
        self.raw = dict(raw)

    def to_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "rewards": self.rewards, "error": self.error}


def parse_rewards(reward_json: str | None, reward_txt: str | None) -> tuple[dict[str, float], str | None]:
    """Harbor's reward files: ``reward.json`` (an object of numbers, or a number) first, else
    ``reward.txt`` (one number). Returns the named rewards (``reward`` the main one) or an error."""
    if reward_json is not None:
        try:
            value = json.loads(reward_json)
        except ValueError as e:
            return {}, f"reward.json is not JSON: {e}"
        items = value if isinstance(value, dict) else {"reward": value}
        out: dict[str, float] = {}
        for k, v in items.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                return {}, f"reward.json: {k!r} is {v!r}, not a finite number"
            out[str(k)] = float(v)
        if not out:
            return {}, "reward.json is empty"
        if "reward" not in out:
            out = {"reward": sum(out.values()) / len(out), **out}
        return out, None
    if reward_txt is not None:
        try:
            v = float(reward_txt.strip())
        except ValueError:
            return {}, f"reward.txt is not a number: {reward_txt.strip()[:80]!r}"
        if not math.isfinite(v):
            return {}, f"reward.txt: {v!r} is not finite"
        return {"reward": v}, None
    return {}, "the verifier wrote no reward (/logs/verifier/reward.json or reward.txt)"


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
        import dataclasses

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
            "tmp": TMP,
            "unpack": unpack,
            "argv": argv,
            "cwd": self.task.build.workdir,
            "env": {**self.task.build.env, **env},
            "path": self.task.build.env.get("PATH", PATH),
            "home": self.task.build.workdir,
            "timeout": timeout,
            # What the tests may write: the workspace, /tmp (and so /logs), never /tests or /solution.
            "write": ["/workspace", "/tmp", "/dev/null"],
            "require_landlock": "landlock" not in self.allow_missing,
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

    def verify(self) -> Verdict:
        """Run the task's tests on the workspace as it is now (see the module's text)."""
        assert self.task is not None
        task = self.task
        self._sandbox(task.build.workdir)
        raw = self._graded_call(
            ["bash", "/tests/test.sh"], "tests", task.tests_tar, task.verifier_env, task.verifier_timeout_s,
            "test-stdout.txt",
        )  # fmt: skip
        if "error" in raw:
            return Verdict(0.0, {}, raw["error"], raw)
        rewards, error = parse_rewards(raw.get("reward_json"), raw.get("reward_txt"))
        if raw.get("timed_out"):
            error = f"the verifier ran out of time ({task.verifier_timeout_s:g} s)" + (f"; {error}" if error else "")
        reward = rewards.get("reward", 0.0) if error is None or rewards else 0.0
        return Verdict(min(1.0, max(0.0, reward)), rewards, error, raw)

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
