"""Container mode (issue 47): Harbor tasks as Harbor runs them, each in a container built from its
own ``environment/Dockerfile`` on the local Docker engine, graded behind RFC 0015's boundary.

What these show, each with a real engine (skipped without one):

* Harbor's published harbor-cookbook recipes, copied unchanged (``fixtures/harbor-cookbook``):
  ``simple-task`` (``FROM ubuntu:24.04``, Harbor's verifier preamble: ``apt-get install curl``,
  uv's install script, ``uvx --with pytest==8.4.1 pytest``) scores 1 with its reference solution
  and 0 with a null agent, offline; the recipes this machine cannot run are refused in a table
  naming the field (``docker-compose.yaml``, ``[[steps]]``). On the code before, loading the
  recipes raised TaskError (Dockerfile RUN apt-get install of packages the host lacks) and there
  was no container mode at all.
* mini-swe-agent driven by the scripted model solves a task whose Dockerfile installs a Debian
  package the host does not have (``dc``), its commands running inside the task container, every
  model call in the trace.
* The grading boundary in the container (the container-mode equivalents of
  test_grading_attacks.py): the agent's shell finds neither the tests nor the solution anywhere
  in its container; a reward pre-written by the agent, a process it leaves running to rewrite the
  reward, a reward.json it made a directory, a process the tests start that outlives them, a
  verifier it hangs, and a bash it replaces each earn 0 (the null baseline), while the reference
  earns 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harbor_env.check import main as check_main
from harbor_env.container import docker_available
from harbor_env.server import HarborEnvironment

import openenv

pytestmark = pytest.mark.skipif(docker_available() is not None, reason="container mode needs a Docker engine")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
COOKBOOK = FIXTURES / "harbor-cookbook" / "recipes"
SECRET = "the-expected-answer-is-42"


def _task(root: Path, name: str, *, dockerfile: str, test_sh: str, solve_sh: str, toml: str = "") -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(toml or "[agent]\ntimeout_sec = 300.0\n\n[verifier]\ntimeout_sec = 60.0\n")
    (d / "instruction.md").write_text(f"Do the task {name}.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "tests" / "secret.txt").write_text(SECRET + "\n")
    (d / "solution" / "solve.sh").write_text(solve_sh)
    return d


def _play(env_class: type[HarborEnvironment], task_id: str, commands: list[str]) -> tuple[float, list[Any]]:
    """One episode over a real server through the environment's tools: each command through
    ``shell``, then ``submit``; the reward and what each shell call returned."""

    async def main() -> tuple[float, list[Any]]:
        async with openenv.Server(env_class, "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
            await env.reset(options={"task_id": task_id})
            outs = []
            for c in commands:
                r = await env.step(openenv.CallToolAction("shell", {"command": c}))
                outs.append(r.observation.result.structured_content or r.observation.result.data)
            r = await env.step(openenv.CallToolAction("submit", {}))
            return float(r.reward or 0.0), outs

    return asyncio.run(asyncio.wait_for(main(), 900))


def test_published_cookbook_recipes_score_as_harbor_scores_them_or_are_refused_by_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """simple-task, unchanged, needs apt, uv's installer and pytest from the package index:
    harbor-packages serves them with no internet; the recipe with steps is refused in a table (no
    traceback) naming the field (the compose recipes: test_compose.py)."""
    code = check_main(["check", str(COOKBOOK), "--mode", "container", "--task", "simple-task",
                       "--task", "multi-step"])  # fmt: skip
    out = capsys.readouterr().out
    assert "ok   simple-task: reference 1, null 0" in out, out
    assert "PASSED ../tests/test_state.py::test_hello_file_contents" in out  # the verifier's own output
    assert "FAILED ../tests/test_state.py::test_hello_file_exists" in out
    assert "task.toml [[steps]]" in out and "Traceback" not in out
    assert code == 1  # one refused


def test_mini_swe_agent_solves_a_task_whose_dockerfile_installs_a_system_package(tmp_path: Path) -> None:
    """The task's Dockerfile installs ``dc`` (not on this host): the scripted agent's ``dc`` runs
    inside the task container; the task's tests pay 1, and every model call is traced."""
    pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")
    from openenv.harness import decode_call, read_trace

    assert shutil.which("dc") is None or pytest.skip("dc is on this host: the test would not show where it ran")
    tasks = tmp_path / "tasks"
    _task(
        tasks, "power-of-two",
        dockerfile="FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y dc\nWORKDIR /app\n",
        test_sh='#!/bin/bash\n[ "$(cat /app/answer.txt)" = 18446744073709551616 ] && echo 1 > /logs/verifier/reward.txt'
        " || echo 0 > /logs/verifier/reward.txt\n",
        solve_sh="#!/bin/bash\necho '2 64 ^ p' | dc > /app/answer.txt\n",
    )  # fmt: skip
    script = tmp_path / "steps.json"
    steps = [{"shell": "envtool shell command=\"echo '2 64 ^ p' | dc > /app/answer.txt\""}, {"shell": "envtool submit"},
             {"shell": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]  # fmt: skip
    script.write_text(json.dumps({"steps": steps}))
    env = {**os.environ, "HARBOR_TASKS": str(tasks), "HARBOR_MODE": "container", "GRPC_VERBOSITY": "ERROR"}
    cli = [sys.executable, "-m", "openenv.cli"]
    ready, model_log = tmp_path / "ready", tmp_path / "model.log"
    serve = [
        *cli,
        "serve",
        "harbor_env.server:HarborEnvironment",
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--no-http",
    ]
    procs = []
    try:
        with (tmp_path / "serve.log").open("wb") as f:
            procs.append(subprocess.Popen(serve, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        with model_log.open("wb") as f:
            model = [*cli, "harness", "scripted-model", "--script", str(script), "--port", "0"]
            procs.append(subprocess.Popen(model, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 300
        while not (ready.is_file() and ready.read_text().strip() and " on http" in model_log.read_text()):
            assert all(p.poll() is None for p in procs), (tmp_path / "serve.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the server or the model did not come up"
            time.sleep(0.2)
        model_url = model_log.read_text().split(" on ", 1)[1].split()[0]
        out = tmp_path / "run"
        r = subprocess.run(
            [*cli, "harness", "run", ready.read_text().strip(), "--agent", "mini-swe-agent", "--task", "power-of-two",
             "--time-budget", "500", "--model-url", model_url, "--model", "scripted", "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)
    trace = read_trace(out)
    (row,) = trace["episodes"]
    assert row["reward"] == 1.0 and row["solved"], row
    calls = [decode_call(c) for c in trace["calls"]]
    assert len(calls) == row["calls"] == 3 and all(c["status"] == 200 for c in calls)
    steps = [s for s in trace["steps"] if s["episode_id"] == row["episode_id"] and s.get("action")]
    actions = [json.loads(s["action"])["tool_name"] for s in steps]
    assert actions[-2:] == ["shell", "submit"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> type[HarborEnvironment]:
    """A task whose tests run the agent's ``/app/check.sh`` and pay 1 when /app/answer.txt says 42."""
    root = tmp_path_factory.mktemp("tasks")
    test_sh = (
        "#!/bin/bash\n"
        "bash /app/check.sh >/dev/null 2>&1\n"
        'if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ] && grep -q 42 /tests/secret.txt; then r=1; else r=0; fi\n'
        "echo $r > /logs/verifier/reward.txt\n"
    )
    _task(root, "answer", dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo 'exit 0' > /app/check.sh\n",
          test_sh=test_sh, solve_sh="#!/bin/bash\necho 42 > /app/answer.txt\n",
          toml="[agent]\ntimeout_sec = 300.0\n\n[verifier]\ntimeout_sec = 10.0\n")  # fmt: skip
    return HarborEnvironment.with_tasks(root, mode="container")


def test_reference_earns_1_and_null_0_in_the_container(guarded: type[HarborEnvironment]) -> None:
    """The baseline the attacks below are measured against."""
    assert _play(guarded, "answer", ["echo 42 > /app/answer.txt"])[0] == 1.0
    assert _play(guarded, "answer", [])[0] == 0.0


def test_the_agent_finds_neither_tests_nor_solution_in_its_container(guarded: type[HarborEnvironment]) -> None:
    """The tests and the solution are copied in only at verification, into another container."""
    _, outs = _play(guarded, "answer", [
        "ls /tests /solution /logs/verifier 2>&1; grep -rIl --exclude-dir=proc --exclude-dir=sys "
        f"{SECRET[:-3]} / 2>/dev/null | head; true",
    ])  # fmt: skip
    assert SECRET not in outs[0]["stdout"] and "secret.txt" not in outs[0]["stdout"], outs
    assert "No such file" in outs[0]["stdout"]


ATTACKS = {
    # a reward written before submit, and a process left running that keeps writing it
    "pre-written reward and a process left running": [
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
        "nohup sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
        ">/dev/null 2>&1 &",
    ],
    # reward.json a directory (the tests' own write fails) and reward.txt forged, both by code the tests run
    "reward.json a directory, reward.txt forged": [
        "printf 'mkdir -p /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt; kill -9 $PPID\\n' > check.sh",
    ],
    # code the tests run leaves a process that rewrites the reward after the tests wrote theirs
    "a process of the tests' outlives them": [
        "printf '(sleep 1; echo 1 > /logs/verifier/reward.txt) &\\n' > check.sh",
    ],
    # code the tests run writes a reward, then hangs the tests until the verifier's time is up
    "the verifier hung after a forged reward": [
        "printf 'echo 1 > /logs/verifier/reward.txt; sleep 600\\n' > check.sh",
    ],
    # the verifier runs on the agent's system: a bash that writes the reward whatever the tests say
    "a replaced bash": [
        "cp /bin/bash /bin/realbash && rm /bin/bash && printf '#!/bin/realbash\\nmkdir -p /logs/verifier; echo 1 > "
        "/logs/verifier/reward.txt; exit 0\\n' > /bin/bash && chmod +x /bin/bash",
    ],
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_on_the_container_verdict_earns_the_null_baseline(
    guarded: type[HarborEnvironment], attack: str
) -> None:
    """Each as a policy would play it through ``shell``, then ``submit``: 0, never 1."""
    reward, outs = _play(guarded, "answer", ATTACKS[attack])
    assert reward == 0.0, (attack, outs)
