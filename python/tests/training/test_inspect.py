"""Inspect AI evaluates an environment: ``env_task`` over math_env served on gRPC, played by
Inspect's built-in mock model (a scripted tool call per sample), produces an eval log whose
scores are the environment's rubric rewards: a right answer 1.0, a wrong one 0.0."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from openenv_testkit import server_thread

from math_env.server import MathEnvironment
from math_env.tasks import TASKS
from openenv.evals.inspect import env_task

QUESTIONS = {t.question: t for t in TASKS}


def _play(messages: list[Any], tools: list[Any], tool_choice: Any, config: Any) -> ModelOutput:
    """Answer task 800 right and 801 wrong (by one), with a submit_answer tool call."""
    question = next(q for q in QUESTIONS if q in messages[0].text)
    task = QUESTIONS[question]
    answer = task.answer + (0 if task.id == 800 else 1)
    assert {t.name for t in tools} >= {"submit_answer", "calculator"}
    out = ModelOutput.for_tool_call("mockllm/model", "submit_answer", {"answer": str(answer)})
    # Usage given: otherwise the mock counts tokens with tiktoken, whose encoding is downloaded.
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


def test_an_inspect_eval_scores_episodes_with_the_environments_rubric(tmp_path: Path) -> None:
    with server_thread(MathEnvironment) as srv:
        task = env_task(srv.address, split="test", limit=2)
        model = get_model("mockllm/model", custom_outputs=_play)
        # Inspect runs its own event loop; the test session's (conftest.py) owns this thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            (log,) = pool.submit(inspect_eval, task, model=model, log_dir=str(tmp_path), display="none").result()
    assert log.status == "success", log.error
    saved = read_eval_log(log.location)
    assert saved.results is not None
    assert saved.results.scores[0].metrics["mean"].value == 0.5
    scores = {s.id: s.scores["environment_reward"] for s in saved.samples or []}
    assert {k: v.value for k, v in scores.items()} == {"800": 1.0, "801": 0.0}
    right = scores["800"].metadata or {}
    assert right["terminated"] and right["reward_breakdown"]["name"] == "reward"
    wrong = scores["801"].metadata or {}
    assert wrong["reward_breakdown"]["children"][1]["children"][0]["reason"] == "incorrect"


def test_the_scripted_model_plays_an_eval_offline_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model openenv/scripted` (docs/training.md: `inspect eval ... --model openenv/scripted`)
    is found by name through protoenv's inspect_ai entry point and needs no network: every
    outside connection goes to a closed proxy port and tiktoken's cache is empty, which is
    where Inspect's own mockllm/model fails (it downloads a tokenizer encoding to count tokens).
    It submits the right answer of task 800, so that sample scores 1 and 801 scores 0.
    make docs-check runs the documented `inspect eval` command line itself."""
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):  # gRPC honours the proxy variables too: the server is local
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    arguments = {"answer": str(TASKS[800].answer)}
    with server_thread(MathEnvironment) as srv:
        task = env_task(srv.address, task_ids=["800", "801"])
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            args = {"tool": "submit_answer", "arguments": arguments}
            run = pool.submit(
                inspect_eval, task, model="openenv/scripted", model_args=args, log_dir=str(tmp_path), display="none"
            )
            (log,) = run.result()
    assert log.status == "success", log.error
    saved = read_eval_log(log.location)
    scores = {s.id: s.scores["environment_reward"].value for s in saved.samples or []}
    assert scores == {"800": 1.0, "801": 0.0}
    assert saved.stats.model_usage["openenv/scripted"].input_tokens > 0  # counted in words
