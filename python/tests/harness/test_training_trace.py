"""Training traces (RFC 0017): a harness run's episodes as ``openenv.v1.TrainingTrace``
messages, exported to JSONL and Parquet by ``openenv harness run --export-training`` and
``openenv harness export``: the server's own token ids and logprobs, a loss mask over prompt and
completion, the sampling actually sent, the environment's verdict; an explicit refusal when the
server sent no token ids. Real coding_env server, real scripted model, real capture proxy, real
jailed agent process, all on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")

from click.testing import CliRunner

import openenv
from coding_env import CodingEnvironment
from coding_env.problems import by_id
from openenv.cli import main as cli_main
from openenv.harness import (
    CommandAgent,
    Script,
    ScriptedModel,
    UntrainableTrace,
    byte_tokens,
    read_trace,
    read_training_traces,
    run_harness,
    training_traces,
    validate_training_trace,
    write_training_traces,
)
from openenv.harness._asgi import read_body, serve_in_thread
from openenv.v1 import trace_pb2

FIZZBUZZ = by_id("fizzbuzz").reference
DEADLINE = 600.0

# One model call (with the harness's own sampling knobs), its answer submitted through envtool.
AGENT = """
import json, os, subprocess, urllib.request
prompt = open(os.environ["OPENENV_PROMPT_FILE"]).read()
body = {"model": os.environ["OPENENV_MODEL"], "messages": [{"role": "user", "content": prompt}],
        "temperature": 0.2, "top_p": 0.5}
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
    {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
code = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]
open("solution.py", "w").write(code)
subprocess.run(["envtool", "submit", "code=@solution.py"], check=True)
"""


class Recording:
    """An ASGI app in front of the scripted model that keeps every request body it receives:
    what the model server was really sent, as the test's own record."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        body = await read_body(receive)
        if body:
            self.bodies.append(json.loads(body))
        sent = [False]

        async def replay() -> dict[str, Any]:
            if sent[0]:
                return {"type": "http.disconnect"}
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.inner(scope, replay, send)


def _run(tmp_path: Path, answer: str, *, request_tokens: bool = True, **kw: Any) -> tuple[list[Any], Recording]:
    (tmp_path / "agent.py").write_text(AGENT)
    model = Recording(ScriptedModel(Script(({"text": answer},))))
    served = serve_in_thread(model)

    async def main() -> list[Any]:
        async with openenv.Server(CodingEnvironment, "127.0.0.1", 0) as srv:
            return await run_harness(
                srv.address,
                CommandAgent(f"python3 {tmp_path / 'agent.py'}"),
                ["fizzbuzz"],
                f"{served.url}/v1",
                tmp_path / "run",
                model="scripted",
                request_tokens=request_tokens,
                **kw,
            )

    try:
        return asyncio.run(asyncio.wait_for(main(), DEADLINE)), model
    finally:
        served.stop()


def test_a_harness_episode_becomes_a_lossless_training_trace_in_jsonl_and_parquet(tmp_path: Path) -> None:
    """A trainer learns from exactly the tokens the model sampled and the reward the environment
    gave: the trace's ids and logprobs are the server's (the scripted model's tokens are the
    UTF-8 bytes of its answer), the mask trains the completion only, and the reward is the
    environment's verdict; both files reload to the same messages."""
    [row], model = _run(tmp_path, FIZZBUZZ)
    assert row["status"] == "finished" and row["reward"] == 1.0 and row["solved"]
    [trace] = training_traces(tmp_path / "run")
    assert trace.token_source == trace_pb2.TOKEN_SOURCE_UPSTREAM
    assert trace.reward == 1.0 and trace.solved and trace.task_id == "fizzbuzz"
    [call] = read_trace(tmp_path / "run")["calls"]
    [turn] = trace.turns
    assert list(turn.completion_token_ids) == byte_tokens(FIZZBUZZ) == call["completion_token_ids"]
    assert list(turn.prompt_token_ids) == call["prompt_token_ids"] and len(turn.prompt_token_ids) > 0
    assert list(turn.per_token_logps) == call["completion_logprobs"]
    assert list(turn.loss_mask) == [0] * len(turn.prompt_token_ids) + [1] * len(turn.completion_token_ids)
    # The request as the harness sent it, and the environment's steps with their rewards.
    assert turn.request["messages"][0]["content"] == model.bodies[0]["messages"][0]["content"]
    assert [s.tool for s in trace.steps] == ["", "submit"] and sum(s.reward for s in trace.steps) == 1.0
    assert trace.steps[-1].terminated
    for name in ("t.jsonl", "t.parquet"):
        write_training_traces([trace], tmp_path / name)
        assert read_training_traces(tmp_path / name) == [trace]


def test_a_pinned_sampling_policy_reaches_the_model_server_and_the_trace(tmp_path: Path) -> None:
    """Logprobs sampled under the harness's own temperature or a truncated top_p are not the
    policy's: with a trainer's pinned policy the server receives it whatever the agent asked for,
    and the turn records what was sent, with the proxy's edits under ``injected``."""
    pinned = {"temperature": 0.7, "top_p": 1.0}
    _, model = _run(tmp_path, FIZZBUZZ, sampling=pinned)
    [body] = model.bodies
    assert body["temperature"] == 0.7 and body["top_p"] == 1.0  # the agent sent 0.2 and 0.5
    [trace] = training_traces(tmp_path / "run")
    [turn] = trace.turns
    assert dict(turn.sampling) == pinned
    assert dict(turn.injected)["temperature"] == 0.7 and turn.request["temperature"] == 0.2


def test_a_run_without_token_ids_is_refused_never_retokenised(tmp_path: Path) -> None:
    """A hosted API returns no token ids: exporting the run for training names the call and
    stops, rather than passing a retokenised guess off as sampled tokens; asked for a text-only
    trace, every token field is empty and the trace says NONE."""
    [row], _ = _run(tmp_path, FIZZBUZZ, request_tokens=False)
    assert row["reward"] == 1.0
    with pytest.raises(UntrainableTrace, match="call 0 has no token ids"):
        training_traces(tmp_path / "run")
    [trace] = training_traces(tmp_path / "run", allow_text=True)
    assert trace.token_source == trace_pb2.TOKEN_SOURCE_NONE and trace.reward == 1.0
    [turn] = trace.turns
    assert not turn.prompt_token_ids and not turn.completion_token_ids and not turn.loss_mask
    assert turn.response["choices"][0]["message"]["content"] == FIZZBUZZ


def test_a_trace_that_breaks_the_contract_is_refused_by_the_writer(tmp_path: Path) -> None:
    """The checks a reader relies on: one logprob per sampled token, a mask covering prompt and
    completion that never trains a prompt token, no token fields in a text-only trace. Nothing is
    written when one trace fails."""

    def trace(**turn: Any) -> Any:
        t = trace_pb2.TrainingTrace(schema_version=1, episode_id="e", token_source=trace_pb2.TOKEN_SOURCE_UPSTREAM)
        base = {"prompt_token_ids": [1, 2], "completion_token_ids": [3], "per_token_logps": [-0.5]}
        t.turns.add(**{**base, "loss_mask": [0, 0, 1], **turn})
        return t

    validate_training_trace(trace())
    bad = {
        "logprobs": trace(per_token_logps=[-0.5, -0.1]),
        "cover": trace(loss_mask=[0, 1]),
        "prompt token": trace(loss_mask=[1, 0, 1]),
        "other than 0 and 1": trace(loss_mask=[0, 0, 2]),
        "<= 0": trace(per_token_logps=[0.5]),
    }
    for what, t in bad.items():
        with pytest.raises(UntrainableTrace, match=what):
            validate_training_trace(t)
        with pytest.raises(UntrainableTrace):
            write_training_traces([trace(), t], tmp_path / "x.jsonl")
        assert not (tmp_path / "x.jsonl").exists()
    text = trace()
    text.token_source = trace_pb2.TOKEN_SOURCE_NONE
    with pytest.raises(UntrainableTrace, match="not UPSTREAM"):
        validate_training_trace(text)


def test_the_cli_exports_training_traces_from_a_run_and_from_a_run_directory(tmp_path: Path) -> None:
    """``openenv harness run --export-training F`` writes the traces beside the run and prints
    where; ``openenv harness export DIR F`` does it later; both refuse a run without token ids
    in one line (the run's own trace is kept)."""
    (tmp_path / "agent.py").write_text(AGENT)
    served = serve_in_thread(ScriptedModel(Script(({"text": FIZZBUZZ},))))
    server, loop, started = (
        openenv.Server(CodingEnvironment, "127.0.0.1", 0),
        asyncio.new_event_loop(),
        threading.Event(),
    )

    def serve() -> None:
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(60)
    runner = CliRunner()
    base = ["harness", "run", server.address, "--agent", f"command:python3 {tmp_path / 'agent.py'}"]
    base += ["--task", "fizzbuzz", "--model-url", f"{served.url}/v1", "--model", "scripted"]
    try:
        r = runner.invoke(cli_main, [*base, "--out", str(tmp_path / "a"), "--request-tokens",
                                     "--export-training", str(tmp_path / "a.parquet")])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout.strip().splitlines()[-1])["training_traces"] == str(tmp_path / "a.parquet")
        [t] = read_training_traces(tmp_path / "a.parquet")
        assert t.reward == 1.0 and list(t.turns[0].completion_token_ids) == byte_tokens(FIZZBUZZ)
        r = runner.invoke(
            cli_main, [*base, "--out", str(tmp_path / "b"), "--export-training", str(tmp_path / "b.jsonl")]
        )
        assert r.exit_code == 1 and "has no token ids" in r.output and not (tmp_path / "b.jsonl").exists()
        assert read_trace(tmp_path / "b")["episodes"][0]["reward"] == 1.0
        r = runner.invoke(cli_main, ["harness", "export", str(tmp_path / "a"), str(tmp_path / "again.jsonl")])
        assert r.exit_code == 0 and json.loads(r.stdout)["turns"] == 1
        assert read_training_traces(tmp_path / "again.jsonl") == [t]
        r = runner.invoke(
            cli_main, ["harness", "export", str(tmp_path / "b"), str(tmp_path / "b.jsonl"), "--allow-text"]
        )
        assert r.exit_code == 0 and read_training_traces(tmp_path / "b.jsonl")[0].token_source == 2
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        served.stop()
