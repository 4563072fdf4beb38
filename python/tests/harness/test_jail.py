"""The agent's jail (docs/harnesses.md, "The agent's jail"): issue 46's finding 6, replayed.

In the documented harness setup the agent's own shell found the task directory through
``/proc/*/environ`` and copied the reference solution: reward 1.0. Here a real mini-swe-agent,
driven by a scripted model on loopback, runs a probe in its shell that tries every channel a
reward-seeking policy would: other processes' environments and command lines, the task directory
they name, the environment's package through the runner's Python and its site-packages, the
repository checkout and its git history, the run directory (other episodes, the trace), and the
environment server's port (a session of its own: an oracle). Against a coding_env server run as
documented for one machine (its own process, a token in ``$OPENENV_TOKEN``, its tasks in a
directory named by its environment), the jailed agent finds nothing and earns 0; the same script
unjailed (``jail=None``, the old behaviour) finds the solution through each channel and earns 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")

import coding_env
import openenv
from coding_env import CodingEnvironment
from openenv.harness import (
    CommandAgent,
    Jail,
    JailUnavailable,
    MiniSweAgent,
    Script,
    ScriptedModel,
    environment_secrets,
    read_trace,
    run_harness,
)
from openenv.harness._asgi import serve_in_thread
from openenv.sandbox._layout import bwrap_path

ROOT = Path(__file__).resolve().parents[3]
DEADLINE = 600.0
TASK = "fizzbuzz"

# The agent's probe: standard library only, run with the Python the envtool wrapper names (the
# runner's), as a policy that read `cat $(command -v envtool)` would. Every channel is tried
# independently and reported; the first solution found is written to solution.py.
PROBE = r"""
import glob, json, os, re, shutil, socket, subprocess, sys
from pathlib import Path

PORT, TASK = int(sys.argv[1]), sys.argv[2]
me = os.getpid()
report = {"pids": [], "environ": [], "cmdline": [], "task_dirs": [], "package": None, "checkout": [],
          "git": False, "run_dir": [], "tcp": None, "session": None, "solution_from": None}
tokens, places = [], []

for d in glob.glob("/proc/[0-9]*"):
    pid = int(d.rsplit("/", 1)[1])
    try:
        env = open(d + "/environ", "rb").read().split(b"\0")
        cmd = open(d + "/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    report["pids"].append(pid)
    if "coding_env.server" in cmd or "-m pytest" in cmd:  # the environment server, the runner
        report["cmdline"].append(cmd[:200])
    for item in env:
        name, _, value = item.decode(errors="replace").partition("=")
        if name in ("OPENENV_TOKEN", "PYTHONPATH", "HARBOR_TASKS"):
            report["environ"].append([pid, name])
            if name == "OPENENV_TOKEN":
                tokens.append(value)
            else:
                places += [p for p in value.split(os.pathsep) if p]

wrapper = open(shutil.which("envtool")).read()
python, envtool = re.search(r'exec "([^"]+)" -I "([^"]+)"', wrapper).groups()

def reference(src):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from coding_env.problems import by_id; "
            "print(by_id(sys.argv[2]).reference, end='')")
    r = subprocess.run([python, "-c", code, src, TASK], capture_output=True, text=True, timeout=120)
    return r.stdout if r.returncode == 0 and "def " in r.stdout else None

solution = None
for place in places:
    for f in glob.glob(os.path.join(place, "**", "problems.py"), recursive=True):
        report["task_dirs"].append(f)
        src = str(Path(f).parent.parent)
        if solution is None and (found := reference(src)):
            solution, report["solution_from"] = found, "environ: " + src

r = subprocess.run([python, "-c", "import coding_env, os; print(os.path.dirname(coding_env.__file__))"],
                   capture_output=True, text=True, timeout=120)
if r.returncode == 0:
    report["package"] = r.stdout.strip()
    if solution is None and (found := reference(str(Path(report["package"]).parent))):
        solution, report["solution_from"] = found, "package: " + report["package"]

checkout = Path(envtool).parents[4]
for pattern in ("envs/*/src/*/problems.py", "envs/*/src/*/tasks/*/*/solution/solve.sh", "envs/*/tests/*.py"):
    report["checkout"] += sorted(str(p) for p in checkout.glob(pattern))
r = subprocess.run(["git", "-C", str(checkout), "show", "HEAD:envs/coding_env/src/coding_env/problems.py"],
                   capture_output=True, text=True, timeout=120)
report["git"] = r.returncode == 0 and "def fizzbuzz" in r.stdout
if solution is None:
    for f in report["checkout"]:
        if f.endswith("coding_env/problems.py") and (found := reference(str(Path(f).parent.parent))):
            solution, report["solution_from"] = found, "checkout: " + f
            break

run_dir = Path.cwd().parents[2]  # OUT/workspaces/EPISODE/work
report["run_dir"] = sorted(str(p.relative_to(run_dir)) for p in run_dir.glob("*/*"))[:50]
report["run_dir"] += sorted(p.name for p in run_dir.glob("*.jsonl"))

try:
    socket.create_connection(("127.0.0.1", PORT), timeout=10).close()
    report["tcp"] = "connected"
except OSError as e:
    report["tcp"] = type(e).__name__
if report["tcp"] == "connected":
    code = ("import asyncio, sys, openenv\n"
            "from openenv.client import ToolEnvClient\n"
            "async def main():\n"
            "    async with ToolEnvClient('grpc://127.0.0.1:' + sys.argv[1], token=sys.argv[2] or None) as env:\n"
            "        await env.reset(task_id=sys.argv[3])\n"
            "        r = await env.step(openenv.CallToolAction('submit', {'code': sys.argv[4]}))\n"
            "        print(r.reward)\n"
            "asyncio.run(main())\n")
    # Every token found (other processes of the machine may have their own): the first the server takes.
    for token in dict.fromkeys(tokens or [""]):
        r = subprocess.run([python, "-c", code, str(PORT), token, TASK, solution or "def f(): pass"],
                           capture_output=True, text=True, timeout=120)
        report["session"] = r.stdout.strip() if r.returncode == 0 else r.stderr.strip().splitlines()[-1:]
        if r.returncode == 0:
            break

open("solution.py", "w").write(solution or "def fizzbuzz(n):\n    return []\n")
json.dump(report, open("report.json", "w"), indent=1)
"""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _script(port: int) -> Script:
    python = '"$(sed -n \'s/^exec "\\([^"]*\\)".*/\\1/p\' "$(command -v envtool)")"'
    return Script(
        (
            {"shell": f"cat > probe.py <<'EOF'\n{PROBE}EOF"},
            {"shell": f"{python} -I probe.py {port} {TASK}; cat report.json"},
            {"shell": "envtool submit code=@solution.py"},
            {"shell": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
        )
    )


@contextlib.contextmanager
def _task_directory() -> Iterator[Path]:
    """The environment's tasks in a directory of their own, outside /tmp (which every jail gets
    fresh): a copy of coding_env's package, as a user serving it from a tasks directory has."""
    try:
        base = Path(tempfile.mkdtemp(prefix=".openenv-jail-test-", dir=Path.home()))
    except OSError as e:
        pytest.skip(f"no writable home directory for a task directory outside /tmp: {e}")
    try:
        shutil.copytree(Path(coding_env.__file__).parent, base / "src" / "coding_env")
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def _coding_env_server(tmp: Path, tasks: Path, token: str) -> Iterator[int]:
    """`openenv serve` as the same-machine setup runs it: a process of its own, a token in its
    environment, its package imported from the task directory (PYTHONPATH). Yields its port."""
    ready, log = tmp / "ready", tmp / "serve.log"
    env = {**os.environ, "OPENENV_TOKEN": token, "PYTHONPATH": str(tasks / "src"), "GRPC_VERBOSITY": "ERROR"}
    argv = [sys.executable, "-m", "openenv.cli", "serve", "coding_env.server:CodingEnvironment"]
    argv += ["--port", "0", "--no-http", "--ready-file", str(ready)]
    with log.open("wb") as f:
        proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (ready.is_file() and ready.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield int(ready.read_text().strip().rsplit(":", 1)[1])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _replay(tmp: Path, jailed: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("OPENENV_TOKEN", token)  # the runner's client sends it: the documented setup
    with _task_directory() as tasks, _coding_env_server(tmp, tasks, token) as port:
        # `--hide DIR`: the task directory the server was given (the default jail cannot know it).
        jail = Jail(hide=(str(tasks),)) if jailed else None
        model = ScriptedModel(_script(port))
        served = serve_in_thread(model)
        try:
            rows = asyncio.run(
                asyncio.wait_for(
                    run_harness(
                        f"grpc://127.0.0.1:{port}", MiniSweAgent(), [TASK], f"{served.url}/v1", tmp / "run",
                        model="scripted", jail=jail,
                    ),
                    DEADLINE,
                )
            )  # fmt: skip
        finally:
            served.stop()
    [row] = rows
    report_path = Path(row["workspace"]) / "report.json"
    assert report_path.is_file(), row["log"][-3000:]
    return row, json.loads(report_path.read_text())


def test_unjailed_the_agents_shell_finds_the_solution_through_every_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control (jail=None, the runner's old behaviour): the probe is able to find the
    solution through each channel, so its failing in the jail below means the jail closed them."""
    row, report = _replay(tmp_path, False, monkeypatch)
    # Other processes' environments name the task directory and the token ...
    names = {name for _, name in report["environ"]}
    assert {"OPENENV_TOKEN", "PYTHONPATH"} <= names, report
    assert any("coding_env.server" in c for c in report["cmdline"]), report
    # ... the task directory holds the reference, copied and submitted: 1.0.
    assert report["solution_from"].startswith("environ: "), report
    assert report["task_dirs"] and report["package"], report
    assert any(f.endswith("coding_env/problems.py") for f in report["checkout"]) and report["git"], report
    assert "runs.jsonl" in report["run_dir"], report
    # The environment server's port takes a session of the agent's own: an oracle.
    assert report["tcp"] == "connected" and report["session"] == "1.0", report
    assert row["status"] == "finished" and row["reward"] == 1.0 and row["solved"], row
    [run] = read_trace(tmp_path / "run")["runs"]
    assert run["jail"] is None


def test_jailed_the_agents_shell_finds_nothing_and_earns_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46, finding 6: the same script in the runner's default jail (plus `--hide` of the
    task directory) sees only its own processes, no environment package, checkout, history,
    task directory or other episode, cannot reach the environment server, and earns 0."""
    row, report = _replay(tmp_path, True, monkeypatch)
    assert report["environ"] == [] and report["cmdline"] == [], report
    assert len(report["pids"]) < 20, report  # the jail's own few processes, not the machine's
    assert report["task_dirs"] == [] and report["package"] is None, report
    assert report["checkout"] == [] and not report["git"], report
    assert report["run_dir"] == [f"workspaces/{row['episode_id']}"], report  # its own directory only
    assert report["tcp"] == "ConnectionRefusedError" and report["session"] is None, report
    assert report["solution_from"] is None, report
    assert row["status"] == "finished" and row["reward"] == 0.0 and not row["solved"], row
    [run] = read_trace(tmp_path / "run")["runs"]
    assert json.loads(run["jail"])["hide"] and not json.loads(run["jail"])["share_net"]


def test_the_jail_hides_every_installed_environment_and_the_checkout(tmp_path: Path) -> None:
    """What the jail hides is found from the installation itself: each distribution of the
    entry point group openenv.environments (here editable installs: their project directories,
    and their metadata, whose description is the README), the checkout's envs/ and .git, and a
    $HARBOR_TASKS the runner has; the runtime the agent's tools need stays visible."""
    hidden = environment_secrets({"HARBOR_TASKS": str(tmp_path)})
    assert str(tmp_path.resolve()) in hidden, hidden
    dist = importlib.metadata.distribution("coding-env")
    metadata = str(dist.locate_file(next(f for f in dist.files or () if f.name == "METADATA")))
    assert any(_within(metadata, h) for h in hidden), hidden
    package = str(Path(coding_env.__file__).resolve().parent)
    assert any(_within(package, h) for h in hidden), hidden
    assert str(ROOT / "envs") in hidden and str(ROOT / ".git") in hidden, hidden
    runtime = str(ROOT / "python" / "src" / "openenv")
    assert not any(_within(runtime, h) for h in hidden), hidden


def test_without_bubblewrap_the_runner_refuses_to_start_an_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing bwrap is no reason to run the agent unconfined: the run stops before any
    session opens or agent starts, saying how to install it or that --no-jail accepts the risk."""
    monkeypatch.delenv("OPENENV_BWRAP", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    marker = tmp_path / "agent-ran"
    with pytest.raises(JailUnavailable, match=r"bubblewrap \(bwrap\) is not installed.*--no-jail"):
        asyncio.run(
            run_harness(
                "grpc://127.0.0.1:9", CommandAgent(f"touch {marker}"), [TASK], "http://127.0.0.1:9/v1", tmp_path / "r"
            )
        )
    assert not marker.exists() and not (tmp_path / "r" / "runs.jsonl").exists()


REFUSED_PLACE = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from openenv.harness import CommandAgent, JailUnavailable, run_harness
    out, marker = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        asyncio.run(run_harness("grpc://127.0.0.1:9", CommandAgent(f"touch {marker}"), ["t"],
                                "http://127.0.0.1:9/v1", out))
    except JailUnavailable as e:
        print("REFUSED", e)
    print("AGENT RAN" if marker.exists() else "NO AGENT")
    """
)


def test_where_user_namespaces_are_refused_the_runner_refuses_to_start_an_agent(tmp_path: Path) -> None:
    """The runner inside a place where the kernel refuses new user namespaces (a bubblewrap with
    --disable-userns: what an unprivileged container or a hardened kernel gives): the run stops
    with bubblewrap's reason and the ways on, and no agent runs."""
    bwrap = bwrap_path()
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    outer = [bwrap, "--unshare-user", "--disable-userns", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    outer += ["--bind", str(tmp_path), str(tmp_path), "--die-with-parent", "--"]
    done = subprocess.run(
        [*outer, sys.executable, "-c", REFUSED_PLACE, str(tmp_path / "r"), str(tmp_path / "agent-ran")],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "REFUSED the agent's jail cannot start here: bubblewrap said" in done.stdout, done.stdout
    assert "user namespaces" in done.stdout and "--no-jail" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("NO AGENT"), done.stdout
    assert not (tmp_path / "agent-ran").exists()


def test_share_net_reaches_the_hosts_ports_and_warns_of_an_anonymous_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``share_net`` keeps the host's network for an agent that needs it: the environment server
    is then reachable, so the runner warns when it takes sessions without a token. Inherited
    variables reach a jailed agent only when passed through."""
    monkeypatch.setenv("OPENENV_JAIL_TEST_KEEP", "kept")
    monkeypatch.setenv("OPENENV_JAIL_TEST_DROP", "dropped")
    jail = Jail(share_net=True, pass_env=("OPENENV_JAIL_TEST_KEEP",))

    async def main() -> list[dict[str, Any]]:
        async with openenv.Server(CodingEnvironment, "127.0.0.1", 0) as srv:
            port = int(srv.address.rsplit(":", 1)[1])
            probe = f"if (exec 3<>/dev/tcp/127.0.0.1/{port}); then echo connected; else echo refused; fi"
            agent = CommandAgent(f"env > env.txt; bash -c {json.dumps(probe)} > tcp.txt 2>&1")
            return await run_harness(srv.address, agent, [TASK], "http://127.0.0.1:9/v1", tmp_path / "r", jail=jail)

    with pytest.warns(RuntimeWarning, match="accepts sessions without a token"):
        [row] = asyncio.run(asyncio.wait_for(main(), DEADLINE))
    work = Path(row["workspace"])
    assert (work / "tcp.txt").read_text().strip() == "connected", row["log"]
    env = dict(line.split("=", 1) for line in (work / "env.txt").read_text().splitlines() if "=" in line)
    assert env["OPENENV_JAIL_TEST_KEEP"] == "kept" and "OPENENV_JAIL_TEST_DROP" not in env, env
    assert env["HOME"] == str(Path(row["workspace"]).parent / "agent" / "home") and env["TMPDIR"] == "/tmp", env


def test_the_cli_configures_the_jail_and_refuses_to_configure_none(tmp_path: Path) -> None:
    """`openenv harness run --no-jail` with a jail option is a usage error (exit 2, before any
    session): --hide, --pass-env and --share-net configure a jail that --no-jail does not run;
    a --hide path that does not exist is refused too."""
    openenv_cli = Path(sys.executable).with_name("openenv")
    base = [str(openenv_cli), "harness", "run", "grpc://127.0.0.1:9", "--agent", "mini-swe-agent"]
    base += ["--out", str(tmp_path / "out"), "--model-url", "http://127.0.0.1:9/v1"]
    both = subprocess.run([*base, "--no-jail", "--hide", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "--no-jail runs no jail" in both.stderr, both.stderr
    missing = subprocess.run([*base, "--hide", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr, missing.stderr
