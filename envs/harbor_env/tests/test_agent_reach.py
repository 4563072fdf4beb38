"""What the agent's own shell can reach of a Harbor task before verification (issue 47), in the
documented same-machine setup: ``HARBOR_TASKS=DIR openenv serve ...`` in one process,
``openenv harness run ...`` in another, as docs/harbor.md shows them.

The agent (mini-swe-agent, scripted model) runs one probe in its own jailed shell and the same
probe through ``envtool shell`` (the task's sandbox): every process's ``/proc/*/environ`` and
``/proc/*/cmdline`` searched for the task directory (the server has it in both), then the task's
``tests/`` and ``solution/`` read by their path, as a policy that guessed it would. With the
documented command (``--hide DIR``: the runner does not share the server's environment, so it is
told which directory to hide), nothing of the tests or the solution reaches the model (and the
prompt's ``envtool`` example names this environment's own tool, not coding_env's). The
control runs the same probe in a shell with no jail (the agent's shell as it was when the issue
was filed) and finds what the issue found: the server's /proc entries name the task directory,
and the tests and the solution are read from it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")
from openenv.harness import decode_call, read_trace
from openenv.sandbox._layout import bwrap_path

ROOT = Path(__file__).resolve().parents[3]
SECRET = "tests-secret-" + "7f3a9c"
SOLUTION_SECRET = "solution-secret-" + "51be20"
MARKER = "harbor-reach-marker"

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="the agent's jail needs bubblewrap")


@contextlib.contextmanager
def _tasks_outside_tmp() -> Iterator[Path]:
    """The task directory where a user keeps it: not under /tmp (the jail's /tmp is fresh
    anyway), but in a visible place of the file system (here beside the checkout)."""
    d = Path(tempfile.mkdtemp(prefix=f".{MARKER}-", dir=ROOT))
    try:
        t = d / "leak"
        for sub in ("environment", "tests", "solution"):
            (t / sub).mkdir(parents=True)
        (t / "task.toml").write_text("[agent]\ntimeout_sec = 300.0\n")
        (t / "instruction.md").write_text("Write 42 to /app/answer.txt.\n")
        (t / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
        (t / "tests" / "test.sh").write_text(
            f"#!/bin/bash\n# {SECRET}\n"
            '[ "$(cat /app/answer.txt)" = 42 ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt\n'
        )
        (t / "tests" / "secret.txt").write_text(SECRET + "\n")
        (t / "solution" / "solve.sh").write_text(f"#!/bin/bash\n# {SOLUTION_SECRET}\necho 42 > /app/answer.txt\n")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _probe(tasks: Path) -> str:
    script = (
        f"n=$(grep -l -a {MARKER[:-1]}[{MARKER[-1]}] /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | wc -l); "
        f"echo procs-naming-the-tasks=$n; "
        f"cat {tasks}/leak/tests/secret.txt {tasks}/leak/tests/test.sh {tasks}/leak/solution/solve.sh 2>&1; true"
    )
    return base64.b64encode(script.encode()).decode()


def _run(tmp: Path, tasks: Path, *, hide: bool) -> str:
    """One episode as documented; every model request of it, as text."""
    b64 = _probe(tasks)
    steps = [{"shell": f"echo {b64} | base64 -d | sh"},
             {"shell": f'envtool shell command="echo {b64} | base64 -d | sh"'},
             {"shell": "envtool submit"}, {"shell": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]  # fmt: skip
    (tmp / "steps.json").write_text(json.dumps({"steps": steps}))
    base = {k: v for k, v in os.environ.items() if k != "HARBOR_TASKS"}
    cli = [sys.executable, "-m", "openenv.cli"]
    ready, model_log, serve_log = tmp / "ready", tmp / "model.log", tmp / "serve.log"
    procs = []
    try:
        with serve_log.open("wb") as f:  # the server alone has the task directory (env and cmdline)
            serve = [*cli, "serve", "harbor_env.server:HarborEnvironment", "--port", "0", "--ready-file", str(ready),
                     "--no-http"]  # fmt: skip
            procs.append(subprocess.Popen(serve, env={**base, "HARBOR_TASKS": str(tasks), "GRPC_VERBOSITY": "ERROR"},
                                          stdout=f, stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
        with model_log.open("wb") as f:
            model = [*cli, "harness", "scripted-model", "--script", str(tmp / "steps.json"), "--port", "0"]
            procs.append(subprocess.Popen(model, env=base, stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 300
        while not (ready.is_file() and ready.read_text().strip() and " on http" in model_log.read_text()):
            assert all(p.poll() is None for p in procs), serve_log.read_text()[-2000:] + model_log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the server or the model did not come up"
            time.sleep(0.2)
        model_url = model_log.read_text().split(" on ", 1)[1].split()[0]
        out = tmp / "run"
        argv = [*cli, "harness", "run", ready.read_text().strip(), "--agent", "mini-swe-agent", "--task", "leak",
                "--time-budget", "300", "--model-url", model_url, "--model", "scripted", "--out", str(out)]  # fmt: skip
        if hide:
            argv += ["--hide", str(tasks)]
        r = subprocess.run(argv, env=base, capture_output=True, text=True, timeout=600, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)
    calls = [decode_call(c) for c in read_trace(out)["calls"]]
    assert len(calls) == 4, calls
    return json.dumps(calls)


def test_the_agents_shell_reads_neither_tests_nor_solution_in_the_documented_setup(tmp_path: Path) -> None:
    """Nothing of the task's tests or solution reaches the model, through /proc or by path, from
    the agent's own shell or from the task's sandbox (envtool shell)."""
    with _tasks_outside_tmp() as tasks:
        seen = _run(tmp_path, tasks, hide=True)
    assert SECRET not in seen and SOLUTION_SECRET not in seen
    # the prompt's envtool example is one of this environment's tools, not coding_env's submit code=@...
    assert "envtool shell command=@command.txt" in seen and "code=@" not in seen
    assert seen.count("procs-naming-the-tasks=0") >= 2, seen[-3000:]  # both probes ran, neither saw the server


def test_unjailed_the_same_probe_finds_the_task_directory_through_proc_and_reads_its_tests(tmp_path: Path) -> None:
    """The control, the issue's finding replayed: the same probe in a shell with no jail (what the
    agent's shell was before the runner jailed it; here run directly, without the agent around
    it) finds the server's process naming the task directory in /proc, and reads the tests and
    the solution there. So the test above can fail."""
    with _tasks_outside_tmp() as tasks:
        ready, log = tmp_path / "ready", tmp_path / "serve.log"
        base = {k: v for k, v in os.environ.items() if k != "HARBOR_TASKS"}
        serve = [sys.executable, "-m", "openenv.cli", "serve", "harbor_env.server:HarborEnvironment", "--port", "0",
                 "--ready-file", str(ready), "--no-http"]  # fmt: skip
        with log.open("wb") as f:
            server = subprocess.Popen(serve, env={**base, "HARBOR_TASKS": str(tasks), "GRPC_VERBOSITY": "ERROR"},
                                      stdout=f, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not (ready.is_file() and ready.read_text().strip()):
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.2)
            probe = base64.b64decode(_probe(tasks)).decode()
            seen = subprocess.run(["sh", "-c", probe], env=base, capture_output=True, text=True, timeout=120).stdout
        finally:
            server.terminate()
            server.wait(timeout=60)
    assert SECRET in seen and SOLUTION_SECRET in seen
    assert "procs-naming-the-tasks=0" not in seen and "procs-naming-the-tasks=" in seen, seen
