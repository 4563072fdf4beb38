"""``openenv collect`` and ``openenv.record`` against real servers, as subprocesses: JSONL and
Parquet of the same run hold the same rows and reload through ``datasets``; an interrupted run
(SIGKILL) resumes, skipping the finished episodes; the progress bar shows episodes, steps/s and
the mean reward; ``openai:MODEL`` drives a tool environment through a local OpenAI-compatible
endpoint; the Recorder wrapper writes the same format; ``--push-to-hub --dry-run`` plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from openenv_testenvs import Counter
from openenv_testkit import running, server_thread

import openenv
from gridworld import GridWorldEnvironment
from math_env.server import MathEnvironment
from openenv.record import Recorder, decode_row, load, read_rows

DEADLINE_S = 120.0
TIMING = ("timestamp", "duration_s")


def _collect(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", "collect", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        cwd=cwd,
    )


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        ({k: v for k, v in r.items() if k not in TIMING} for r in rows), key=lambda r: (r["episode_index"], r["step"])
    )


def test_jsonl_and_parquet_hold_the_same_rows_and_reload(tmp_path: Path) -> None:
    with server_thread(GridWorldEnvironment) as srv:
        outs = {}
        for ext in ("jsonl", "parquet"):
            out = tmp_path / f"runs.{ext}"
            args = [srv.address, "--episodes", "4", "--concurrency", "2", "--seed", "7", "--max-steps", "15"]
            r = _collect(*args, "--out", str(out))
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout.splitlines()[-1])["episodes"] == 4
            for word in ("episodes", "steps/s", "mean_reward"):  # the progress bar, on stderr
                assert word in r.stderr
            outs[ext] = out
    rows = _sorted(read_rows(outs["jsonl"]))
    assert rows == _sorted(read_rows(outs["parquet"]))
    assert len({r["episode_id"] for r in rows}) == 4 and sum(r["final"] for r in rows) == 4
    first = decode_row(rows[0])
    assert first["step"] == 0 and first["action"] is None and first["seed"] == 7
    assert first["observation"]["@type"] == "gridworld.v1.Observation"
    assert decode_row(rows[1])["action"]["@type"] == "gridworld.v1.Action"
    for path in outs.values():  # and through datasets, losslessly
        ds = load(path)
        assert _sorted([dict(x) for x in ds]) == rows


POLICY = """
import os, time
from openenv.record import RandomPolicy

_random = RandomPolicy()

def policy(observation, ctx):
    if ctx.episode_index >= 3:  # stall until the test lets it go: an interruption point
        while not os.path.exists("go"):
            time.sleep(0.05)
    return _random(observation, ctx)
"""


def test_an_interrupted_collection_resumes_without_redoing_finished_episodes(tmp_path: Path) -> None:
    (tmp_path / "stall_policy.py").write_text(POLICY)
    out = tmp_path / "runs.jsonl"
    with server_thread(GridWorldEnvironment) as srv:
        args = [srv.address, "--policy", "stall_policy:policy", "--episodes", "6", "--max-steps", "10"]
        cmd = [sys.executable, "-m", "openenv.cli", "collect", *args, "--out", str(out), "--no-progress"]
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while sum(r["final"] for r in read_rows(out)) < 3:
                assert proc.poll() is None, "collect exited before the interruption point"
                assert time.monotonic() < deadline, "no 3 finished episodes in time"
                time.sleep(0.1)
        finally:
            proc.kill()
            proc.wait(30)
        (tmp_path / "go").write_text("")
        r = _collect(*args, "--out", str(out), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert (summary["skipped"], summary["episodes"]) == (3, 3)
    rows = read_rows(out)
    finals = [r for r in rows if r["final"]]
    assert sorted(r["episode_index"] for r in finals) == list(range(6))
    assert len({r["episode_id"] for r in rows}) == 6  # no episode twice, no partial leftovers


class _FakeChat(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat completions endpoint that always calls submit_answer."""

    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "submit_answer", "arguments": '{"answer": "7"}'},
        }
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_openai_policy_plays_a_tool_environment_through_a_local_endpoint(tmp_path: Path) -> None:
    fake = ThreadingHTTPServer(("127.0.0.1", 0), _FakeChat)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    out = tmp_path / "runs.parquet"
    try:
        with server_thread(MathEnvironment) as srv:
            base = f"http://127.0.0.1:{fake.server_address[1]}/v1"
            env = {**os.environ, "OPENAI_API_KEY": "test"}
            r = subprocess.run(
                [sys.executable, "-m", "openenv.cli", "collect", srv.address, "--policy", "openai:fake-model",
                 "--openai-base-url", base, "--episodes", "2", "--split", "test", "--out", str(out)],
                capture_output=True, text=True, timeout=DEADLINE_S, env=env,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
    finally:
        fake.shutdown()
    first = _FakeChat.requests[0]
    assert first["model"] == "fake-model" and "Solve the problem" in first["messages"][0]["content"]
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert offered["submit_answer"]["required"] == ["answer"]
    rows = [decode_row(x) for x in read_rows(out)]
    steps = [x for x in rows if x["step"] == 1]
    assert len(steps) == 2 and all(x["action"]["tool_name"] == "submit_answer" and x["terminated"] for x in steps)
    assert all(x["reward_breakdown"]["name"] == "reward" for x in steps)  # the rubric scored it
    assert {x["task_id"] for x in rows} == {"800", "801"}  # the first tasks of the test split


@pytest.mark.anyio
async def test_the_recorder_wrapper_writes_the_same_format(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    async with running(Counter) as srv:
        async with Recorder(openenv.EnvClient(srv.address), out, policy="hand") as env:
            await env.reset(seed=3)
            await env.step({"delta": 2})
            await env.step({"delta": 5, "finish": "terminated"})
            await env.reset(seed=4)  # left unfinished: recorded as final at its last step on close
    rows = [decode_row(r) for r in read_rows(out)]
    assert [(r["seed"], r["step"], r["reward"], r["final"]) for r in rows] == [
        (3, 0, None, False),
        (3, 1, 2.0, False),
        (3, 2, 5.0, True),
        (4, 0, None, True),
    ]
    assert rows[1]["action"] == {"delta": 2} and rows[2]["terminated"]  # the action as sent


def test_push_to_hub_dry_run_plans_the_upload(tmp_path: Path) -> None:
    with server_thread(GridWorldEnvironment) as srv:
        out = tmp_path / "runs.jsonl"
        r = _collect(srv.address, "--episodes", "1", "--max-steps", "3", "--out", str(out),
                     "--push-to-hub", "someone/rollouts", "--dry-run", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"would upload {out} -> someone/rollouts:data/runs.jsonl (dataset)" in r.stdout
    assert "README.md (dataset)" in r.stdout


def test_a_second_run_is_refused_unless_appended_and_nothing_is_lost(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    with server_thread(GridWorldEnvironment) as srv:
        args = [srv.address, "--episodes", "2", "--max-steps", "3", "--out", str(out), "--no-progress"]
        assert _collect(*args, "--seed", "0").returncode == 0
        before = out.read_bytes()
        other = _collect(*args, "--seed", "100")
        assert other.returncode == 1
        assert "already holds 2 episode(s) of another run (policy random, seeds from 0)" in other.stderr
        assert "--append" in other.stderr and "Traceback" not in other.stderr
        assert out.read_bytes() == before  # left exactly as it was
        added = _collect(*args, "--seed", "100", "--append")
        assert added.returncode == 0, added.stderr
    seeds = sorted(r["seed"] for r in read_rows(out) if r["step"] == 0)
    assert seeds == [0, 1, 100, 101]


def test_columns_are_typed_in_parquet_and_old_json_text_files_still_decode(tmp_path: Path) -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from openenv.record import SCHEMA, collect, load_policy
    from openenv.record.store import RecordStore

    out = tmp_path / "runs.parquet"
    with server_thread(GridWorldEnvironment) as srv:
        import asyncio

        asyncio.run(collect(srv.address, load_policy("random"), out, episodes=2, max_steps=3, progress=False))
    schema = pq.read_schema(out)
    assert pa.types.is_struct(schema.field("observation").type)  # nested types, not JSON text
    assert pa.types.is_struct(schema.field("observation").type.field("agent").type)
    # Plain datasets, no decode step: messages are dicts, repeated fields lists.
    ds = datasets.Dataset.from_parquet(str(out))
    step = ds[1]
    assert step["action"]["@type"] == "gridworld.v1.Action" and step["action"]["move"].startswith("MOVE_")
    assert isinstance(step["observation"]["grid"], list) and isinstance(step["observation"]["agent"]["row"], int)
    assert step["json_columns"] == [] and decode_row(step) == {**step, "metadata": step["metadata"] or {}}

    # A file of the JSON-text format: decode_row and load still read it, and resuming into it
    # rewrites it typed with the same values.
    legacy = tmp_path / "old.parquet"
    old_rows = [
        {**{c: None for c in SCHEMA.names}, "episode_id": "e-1", "episode_index": 0, "seed": 5, "step": 0,
         "observation": json.dumps({"text": "a\nb"}), "metadata": "{}", "terminated": False, "truncated": False,
         "final": True, "policy": "old"},
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(old_rows, schema=SCHEMA), legacy)
    [row] = read_rows(legacy)
    assert decode_row(row)["observation"] == {"text": "a\nb"} and decode_row(row)["metadata"] == {}
    assert load(legacy)[0]["observation"] == {"text": "a\nb"}
    RecordStore(legacy).open()
    assert pa.types.is_struct(pq.read_schema(legacy).field("observation").type)
    assert decode_row(read_rows(legacy)[0])["observation"] == {"text": "a\nb"}
