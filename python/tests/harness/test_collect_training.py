"""``openenv collect --policy openai:MODEL --export-training``: the policy's model calls go through
the harness's capture proxy, which keeps the token ids and logprobs the endpoint returns, and the
episodes become RFC 0017 training traces, validated as ``openenv harness run`` validates them.

Against a scripted OpenAI-compatible endpoint on loopback that returns token ids and logprobs
only when asked (as vLLM does) and keeps every response it sent: the exported turns are exactly
those responses' tokens and logprobs (every call, nothing else), and each episode's reward is the
environment's (the collect file's, and a replay of the same tool calls on a fresh session). A
real math_env server, the real CLI."""

from __future__ import annotations

import itertools
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai", reason="the collect extra: pip install 'protoenv[collect]'")
pytest.importorskip("uvicorn", reason="the harness extra: pip install 'protoenv[harness]'")

from click.testing import CliRunner
from openenv_testkit import server_thread

import openenv
from math_env.server import MathEnvironment
from math_env.tasks import TASKS
from openenv.cli import main as cli_main
from openenv.harness import read_training_traces
from openenv.harness._asgi import read_body, send_json, serve_in_thread
from openenv.record import decode_row, read_rows
from openenv.v1 import trace_pb2


class TokenModel:
    """Chat completions that play math_env: turn 0 calls get_problem, turn 1 submits the answer
    (right for even task ids, off by one for odd ones). With ``return_token_ids`` the response
    carries random prompt and completion ids, with ``logprobs`` random logprobs; every response
    sent is kept (``sent``)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        req = json.loads(await read_body(receive))
        with self._lock:
            n = next(self._ids)
            self.asked.append(req)
        rng = random.Random(n)
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if turn == 0:
            name, args = "get_problem", {}
        else:
            first = req["messages"][0]["content"]
            task = next(t for t in TASKS if first.startswith(t.question + "\n"))
            args = {"answer": str(task.answer + task.id % 2)}
            name = "submit_answer"
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            ],
        }
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        body: dict[str, Any] = {"id": f"chatcmpl-{n}", "object": "chat.completion", "model": req["model"]}
        size = rng.randint(3, 9)
        if req.get("return_token_ids"):
            body["prompt_token_ids"] = [rng.randrange(50_000) for _ in range(rng.randint(20, 40))]
            choice["token_ids"] = [rng.randrange(50_000) for _ in range(size)]
        if req.get("logprobs"):
            lps = [-rng.random() * 5 for _ in range(size)]
            choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": lp} for i, lp in enumerate(lps)]}
        body["choices"] = [choice]
        with self._lock:
            self.sent.append(body)
        await send_json(send, 200, body)


def _collect(*args: str) -> Any:
    """`openenv collect ARGS` through the real CLI, in this process (a subprocess per run would
    cost an interpreter start each)."""
    return CliRunner().invoke(cli_main, ["collect", *args, "--no-progress"], env={"OPENAI_API_KEY": "test"})


def test_collected_episodes_export_the_endpoints_tokens_and_the_environments_rewards(tmp_path: Path) -> None:
    """Four episodes (two solved, two not): one trace per episode, one turn per call the endpoint
    answered, each turn's ids and logprobs those the endpoint sent (loss mask on the completion
    only); each trace's reward equals the episode's return in the collect file and a replay on a
    fresh session. A resumed run (every episode already collected) writes the same traces to
    Parquet from the same run directory."""
    model = TokenModel()
    served = serve_in_thread(model)
    out = tmp_path / "runs.jsonl"
    try:
        with server_thread(MathEnvironment) as srv:
            common = [srv.address, "--policy", "openai:tiny", "--openai-base-url", f"{served.url}/v1"]
            common += ["--episodes", "4", "--split", "test", "--out", str(out)]
            r = _collect(*common, "--export-training", str(tmp_path / "traces.jsonl"))
            assert r.exit_code == 0, r.output[-3000:]
            summary = json.loads(r.output.strip().splitlines()[-1])
            again = _collect(*common, "--export-training", str(tmp_path / "traces.parquet"))
            assert again.exit_code == 0, again.output[-3000:]
            assert json.loads(again.output.strip().splitlines()[-1])["skipped"] == 4
            rows = [decode_row(x) for x in read_rows(out)]
            replayed = {}
            for task_id in sorted({str(x["task_id"]) for x in rows}):
                with openenv.ToolEnvClient(srv.address).sync() as plain:
                    plain.reset(None, None, None, task_id=task_id)
                    plain.step(openenv.CallToolAction("get_problem", {}))
                    answer = str(TASKS[int(task_id)].answer + int(task_id) % 2)
                    replayed[task_id] = plain.step(openenv.CallToolAction("submit_answer", {"answer": answer})).reward
    finally:
        served.stop()
    assert summary["trace_dir"] == str(tmp_path / "runs-trace")
    traces = read_training_traces(tmp_path / "traces.jsonl")
    assert [t.SerializeToString(deterministic=True) for t in read_training_traces(tmp_path / "traces.parquet")] == [
        t.SerializeToString(deterministic=True) for t in traces
    ]
    assert len(traces) == 4 and len(model.sent) == 8
    # The proxy asked for the token data the policy did not ask for.
    assert all(a["return_token_ids"] is True and a["logprobs"] is True for a in model.asked)
    by_id = {b["id"]: b for b in model.sent}
    seen = []
    returns: dict[str, float] = {}
    for x in rows:
        returns[x["episode_id"]] = returns.get(x["episode_id"], 0.0) + float(x["reward"] or 0.0)
    for t in traces:
        assert t.token_source == trace_pb2.TOKEN_SOURCE_UPSTREAM and len(t.turns) == 2
        for turn in t.turns:
            sent = by_id[turn.response["id"]]
            seen.append(sent["id"])
            choice = sent["choices"][0]
            assert list(turn.prompt_token_ids) == sent["prompt_token_ids"]
            assert list(turn.completion_token_ids) == choice["token_ids"]
            assert list(turn.per_token_logps) == [c["logprob"] for c in choice["logprobs"]["content"]]
            assert list(turn.loss_mask) == [0] * len(sent["prompt_token_ids"]) + [1] * len(choice["token_ids"])
            assert [c.name for c in turn.tool_calls] == [choice["message"]["tool_calls"][0]["function"]["name"]]
        assert t.reward == returns[t.episode_id] == replayed[t.task_id]
    assert sorted(seen) == sorted(by_id)  # every call the endpoint answered, once
    assert sorted(t.reward for t in traces) == [0.0, 0.0, 1.0, 1.0]


def test_an_endpoint_without_token_ids_is_refused_unless_text_is_allowed(tmp_path: Path) -> None:
    """Without token ids (the proxy told not to ask, so the endpoint sends none) the export is
    refused naming the episode and the call, and no file is written; the collect file is kept.
    With --allow-text the traces are text-only (no token field), never retokenised."""
    model = TokenModel()
    served = serve_in_thread(model)
    out = tmp_path / "runs.jsonl"
    try:
        with server_thread(MathEnvironment) as srv:
            common = [srv.address, "--policy", "openai:tiny", "--openai-base-url", f"{served.url}/v1"]
            common += ["--episodes", "1", "--split", "test", "--out", str(out), "--no-request-tokens"]
            refused = _collect(*common, "--export-training", str(tmp_path / "t.jsonl"))
            text = _collect(*common, "--export-training", str(tmp_path / "text.jsonl"), "--allow-text")
    finally:
        served.stop()
    assert refused.exit_code != 0 and "no token ids" in refused.output and "call 0" in refused.output
    assert not (tmp_path / "t.jsonl").exists() and len(read_rows(out)) == 3
    assert text.exit_code == 0, text.output[-3000:]
    [trace] = read_training_traces(tmp_path / "text.jsonl")
    assert trace.token_source == trace_pb2.TOKEN_SOURCE_NONE and len(trace.turns) == 2
    assert not any(t.prompt_token_ids or t.completion_token_ids or t.per_token_logps for t in trace.turns)


def test_export_training_needs_an_openai_policy() -> None:
    """Only an openai: policy makes model calls to capture: any other is refused at once."""
    r = _collect("grpc://127.0.0.1:1", "--out", "x.jsonl", "--export-training", "t.jsonl")
    assert r.exit_code == 2 and "openai:MODEL" in r.output
