"""Harbor tasks a user wrote, played by real agent harnesses against the scripted model, offline:
``openenv serve`` + ``openenv harness run --agent mini-swe-agent`` as docs/harbor.md says
(subprocesses), and Codex CLI and OpenCode through ``run_harness``. The same script solves one
task (the task's own tests: reward 1) and fails the other (reward 0); every model call is in the
trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")

from harbor_env.server import HarborEnvironment

import openenv
from openenv.harness import CodexAgent, OpenCodeAgent, Script, ScriptedModel, decode_call, read_trace, run_harness
from openenv.harness._asgi import serve_in_thread

ROOT = Path(__file__).resolve().parents[3]
DEADLINE = 600.0
MINI_FINISH = {"shell": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
TEXT_FINISH = {"text": "Done."}


def write_user_tasks(root: Path) -> Path:
    """Two tasks as a user writes them from docs/harbor.md: the same instruction shape, each
    with its own expected greeting."""
    for name, word in (("say-hello", "hello"), ("say-bye", "bye")):
        d = root / name
        for sub in ("environment", "tests", "solution"):
            (d / sub).mkdir(parents=True)
        (d / "task.toml").write_text('[metadata]\ncategory = "demo"\n\n[agent]\ntimeout_sec = 300.0\n')
        (d / "instruction.md").write_text(f"Write the word `{word}` to `/app/greeting.txt`.\n")
        (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
        (d / "tests" / "test.sh").write_text(
            "#!/bin/bash\n"
            f'if [ "$(cat /app/greeting.txt)" = "{word}" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
        )
        (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {word} > /app/greeting.txt\n")
    return root


def _npm_bin(program: str) -> str | None:
    for candidate in (
        os.environ.get(f"OPENENV_{program.upper()}_BIN"),
        str(ROOT / ".harness-tools/node_modules/.bin" / program),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _check(out: Path, rows: list[dict[str, Any]], served: int, agent: str) -> None:
    by_task = {r["task_id"]: r for r in rows}
    good, bad = by_task["say-hello"], by_task["say-bye"]
    assert good["status"] == "finished" and good["reward"] == 1.0 and good["solved"], good
    assert bad["status"] == "finished" and bad["reward"] == 0.0 and not bad["solved"], bad
    trace = read_trace(out)
    calls = [decode_call(c) for c in trace["calls"]]
    assert len(calls) == served == good["calls"] + bad["calls"] > 0
    assert {c["agent"] for c in calls} == {agent} and all(c["status"] == 200 for c in calls)
    for r in rows:
        mine = sorted((c for c in calls if c["episode_id"] == r["episode_id"]), key=lambda c: c["call_index"])
        assert [c["call_index"] for c in mine] == list(range(r["calls"]))
    steps = [s for s in trace["steps"] if s["episode_id"] == good["episode_id"]]
    assert [json.loads(s["action"])["tool_name"] for s in steps[1:]] == ["shell", "submit"]  # envtool list is no step
    assert steps[-1]["reward"] == 1.0 and steps[-1]["terminated"]


@contextlib.contextmanager
def _process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as f:
        p = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield p
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _wait_for(read: Any, proc: subprocess.Popen[bytes], log: Path) -> str:
    """What ``read()`` returns once it is not empty: each process binds port 0 and says where
    it listens (a port picked free beforehand may be taken by another test before it binds)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        found = read()
        if found:
            return str(found)
        time.sleep(0.2)
    raise AssertionError(f"not serving: {log.read_text()[-3000:]}")


def _text(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""


def test_mini_swe_agent_through_the_cli_scores_a_user_task_by_its_own_tests(tmp_path: Path) -> None:
    tasks = write_user_tasks(tmp_path / "my-tasks")
    script = tmp_path / "steps.json"
    script.write_text(
        json.dumps(
            {
                "steps": [
                    {"shell": "envtool shell command='echo hello > /app/greeting.txt'"},
                    {"shell": "envtool submit"},
                    MINI_FINISH,
                ]
            }
        )
    )
    env = {**os.environ, "HARBOR_TASKS": str(tasks), "GRPC_VERBOSITY": "ERROR"}
    cli = [sys.executable, "-m", "openenv.cli"]
    ready, model_log = tmp_path / "ready", tmp_path / "model.log"
    serve = [*cli, "serve", "harbor_env.server:HarborEnvironment", "--port", "0", "--ready-file", str(ready)]
    with (
        _process([*serve, "--no-http"], env, tmp_path / "serve.log") as server,
        _process([*cli, "harness", "scripted-model", "--script", str(script), "--port", "0"], env, model_log) as model,
    ):
        address = _wait_for(lambda: _text(ready), server, tmp_path / "serve.log")
        said = _wait_for(lambda: " on http" in _text(model_log) and _text(model_log), model, model_log)
        model_url = said.split(" on ", 1)[1].split()[0]
        out = tmp_path / "runs" / "r1"
        r = subprocess.run(
            [*cli, "harness", "run", address, "--agent", "mini-swe-agent",
             "--task", "say-hello", "--task", "say-bye", "--concurrency", "2", "--time-budget", "300",
             "--model-url", model_url, "--model", "scripted", "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=DEADLINE, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        summary = json.loads(r.stdout.strip().splitlines()[-1])
        assert summary["episodes"] == 2 and summary["solved"] == 1 and summary["mean_reward"] == 0.5
    rows = read_trace(out)["episodes"]
    _check(out, rows, len(read_trace(out)["calls"]), "mini-swe-agent")
    assert all(r["calls"] == 3 for r in rows)  # the script's three turns, each a captured call


@pytest.mark.parametrize(
    ("program", "agent_class", "per_episode"), [("codex", CodexAgent, 4), ("opencode", OpenCodeAgent, 5)]
)
def test_an_npm_harness_scores_a_user_task_by_its_own_tests(
    program: str, agent_class: Any, per_episode: int, tmp_path: Path
) -> None:
    exe = _npm_bin(program)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(f"{program} is not installed: make venv installs it under .harness-tools/")
        pytest.skip(f"{program} not installed (make venv installs it under .harness-tools/ when npm is there)")
    env_class = HarborEnvironment.with_tasks(write_user_tasks(tmp_path / "my-tasks"))
    # A first turn in the harness's own shell: Codex starts its MCP servers alongside its first
    # request, so an MCP tool is offered from the second request on.
    script = Script(
        (
            {"shell": "envtool list"},
            {"mcp": "shell", "arguments": {"command": "echo hello > /app/greeting.txt"}},
            {"shell": "envtool submit"},
            TEXT_FINISH,
        )
    )
    model = ScriptedModel(script)
    served = serve_in_thread(model)

    async def main() -> list[dict[str, Any]]:
        async with openenv.Server(env_class, "127.0.0.1", 0) as srv:
            return await run_harness(
                srv.address, agent_class(exe), ["say-hello", "say-bye"], f"{served.url}/v1", tmp_path / "run",
                model="scripted", concurrency=2,
            )  # fmt: skip

    try:
        rows = asyncio.run(asyncio.wait_for(main(), DEADLINE))
    finally:
        served.stop()
    _check(tmp_path / "run", rows, model.requests, program)
    assert all(r["calls"] == per_episode for r in rows), [r["calls"] for r in rows]
