"""TRL 1.16's harness rollout worker (``trl.experimental.async_grpo.openenv_harness``) runs
against this project's sessions unchanged: its own rollout loop (``_HarnessRolloutLoop``, the
loop ``HarnessRolloutWorker`` spawns) imports ``openenv.core.harness`` and drives our factories,
loop-owning (a jailed agent through the capture proxy) and white-box (TRL samples each turn).
The training rows it builds must hold exactly the tokens and logprobs the model server sampled,
and its rewards must be the environment's verdicts. Real coding_env server, real model servers
(the scripted chat model; a scripted ``/v1/completions`` engine speaking the tiny tokenizer), all
on loopback; CPU only (the worker's vLLM weight sync is the GPU path, docs/training.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import multiprocessing as mp
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")
pytest.importorskip("trl.experimental.async_grpo", reason="TRL 1.16 (the training extra)")

import datasets
import tiny_lm
from accelerate.state import PartialState
from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

import openenv
from coding_env import CodingEnvironment
from coding_env.problems import by_id
from openenv.core.harness import (
    EnvSessionFactory,
    HarnessSessionFactory,
    MCPHarnessAdapter,
    TrainableSession,
)
from openenv.core.harness.capture.upstream import NON_POLICY_SAMPLING, training_sampling
from openenv.harness import CommandAgent, Script, ScriptedModel, read_trace
from openenv.harness._asgi import read_body, send_json, serve_in_thread

FIZZBUZZ = by_id("fizzbuzz").reference
TASKS = ["fizzbuzz", "sum_list"]  # the scripted answer solves the first (1.0) and fails the second (0.0)

AGENT = """
import json, os, subprocess, urllib.request
prompt = open(os.environ["OPENENV_PROMPT_FILE"]).read()
body = {"model": os.environ["OPENENV_MODEL"], "messages": [{"role": "user", "content": prompt}], "top_p": 0.9}
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
    {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
code = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]
open("solution.py", "w").write(code)
subprocess.run(["envtool", "submit", "code=@solution.py"], check=True)
"""


class _Env:
    """coding_env's gRPC server on loopback, in a thread of its own (TRL's sessions are
    synchronous, on its pool threads)."""

    def __enter__(self) -> str:
        self.server, self.loop, started = (
            openenv.Server(CodingEnvironment, "127.0.0.1", 0),
            asyncio.new_event_loop(),
            threading.Event(),
        )

        def run() -> None:
            self.loop.run_until_complete(self.server.start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(60)
        return str(self.server.address)

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)


def _rollouts(
    factory: Any, tok: Any, n: int, *, adapter: Any = None, engine_url: str = "http://127.0.0.1:9"
) -> list[Any]:
    """TRL's own rollout loop, in this process: run it until it has scored ``n`` samples (set
    up as ``HarnessRolloutWorker``'s child process sets it up, without the spawn)."""
    PartialState()  # what TRL's child does first: accelerate's logging needs it
    data = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": t}]} for t in TASKS])
    buffer: queue.Queue[Any] = queue.Queue()
    loop = _HarnessRolloutLoop(
        harness_session_factory=factory, harness_adapter=adapter, model_name="policy", dataset=data,
        reward_funcs=[], processing_class=tok, eos_token_ids=[tok.eos_token_id], rollout_buffer=buffer,
        model_version_value=mp.Value("i", 0), heartbeat_value=mp.Value("d", 0.0), failed_event=mp.Event(),
        exception_info_queue=queue.Queue(maxsize=1), metrics_queue=queue.Queue(), num_generations=2,
        max_inflight_tasks=2, vllm_server_url=engine_url, max_tokens=256, temperature=1.0,
        max_tool_calling_iterations=4,
    )  # fmt: skip
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loop.run()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    samples: list[Any] = []
    deadline = time.monotonic() + 600
    try:
        while len(samples) < n and time.monotonic() < deadline and not errors:
            try:
                samples.append(buffer.get(timeout=1.0))
            except queue.Empty:
                continue
    finally:
        with contextlib.suppress(RuntimeError):  # the loop already ended (an error, reported below)
            loop._loop.call_soon_threadsafe(loop._stop_event.set)
        thread.join(300)
    assert not errors, errors
    assert len(samples) >= n, f"{len(samples)} samples within the deadline"
    return samples[:n]


def test_trls_worker_trains_on_the_captured_tokens_and_the_environments_rewards_loop_owning(tmp_path: Path) -> None:
    """Loop-owning: the agent (a program in its jail) calls the model itself; TRL's worker
    waits for each session, reads its RFC 0017 trace and its verdict. Every training row is
    exactly a captured call's prompt and completion ids, trained on the completion only, with the
    captured logprobs; every reward is the environment's (1.0 on fizzbuzz, 0.0 on sum_list);
    the trainer's policy reached the model server in place of the agent's top_p."""
    tok = tiny_lm.tokenizer(["def f(): pass"], vocab_size=300)
    model = serve_in_thread(ScriptedModel(Script(({"text": FIZZBUZZ},))))
    (tmp_path / "agent.py").write_text(AGENT)
    try:
        with _Env() as target:
            factory = functools.partial(
                HarnessSessionFactory, target, CommandAgent(f"python3 {tmp_path / 'agent.py'}"),
                f"{model.url}/v1", tasks=TASKS, out=tmp_path / "rollouts",
            )  # fmt: skip
            samples = _rollouts(factory, tok, 4)
    finally:
        model.stop()
    captured: dict[tuple[int, ...], tuple[list[int], list[float], float, str | None, dict[str, Any]]] = {}
    for run in (tmp_path / "rollouts").iterdir():
        t = read_trace(run)
        if not t["episodes"]:
            continue  # in flight when the loop stopped: cancelled, never scored
        [episode] = t["episodes"]
        for c in t["calls"]:
            key = tuple(c["prompt_token_ids"] + c["completion_token_ids"])
            captured[key] = (c["prompt_token_ids"], c["completion_logprobs"], episode["reward"], episode["task_id"],
                             json.loads(c["injected"]))  # fmt: skip
    assert len(captured) >= 4
    by_task: dict[str | None, list[float]] = {}
    for s in samples:
        prompt, logprobs, reward, task, injected = captured[tuple(int(x) for x in s.input_ids)]
        n = len(prompt)
        assert list(s.completion_mask) == [0] * n + [1] * (len(s.input_ids) - n)
        np.testing.assert_array_equal(s.old_log_probs, np.asarray([0.0] * n + logprobs, dtype=np.float32))
        assert s.metrics["rewards/harness_reward"] == reward
        assert injected["top_p"] == 1.0 and injected["temperature"] == 1.0  # TRL's policy, pinned by the proxy
        by_task.setdefault(task, []).append(reward)
    assert by_task == {"fizzbuzz": [1.0, 1.0], "sum_list": [0.0, 0.0]}


class ScriptedEngine:
    """A scripted OpenAI-compatible ``/v1/completions`` engine, as TRL's white-box worker calls
    vLLM: prompt token ids in, sampled token ids and their logprobs out. Turn n (the assistant
    turns already in the prompt) answers with step n of the script, in the tokenizer's ids."""

    def __init__(self, tok: Any, steps: list[str]) -> None:
        self.tok, self.steps = tok, steps
        self.served: list[tuple[list[int], list[int], list[float]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await read_body(receive))
        prompt = [int(x) for x in body["prompt"]]
        turn = self.tok.decode(prompt).count("<|im_start|>assistant") - 1
        ids = self.tok.encode(self.steps[min(turn, len(self.steps) - 1)] + "<|im_end|>")
        lps = [-0.01 * (1 + i % 5) for i in range(len(ids))]
        self.served.append((prompt, ids, lps))
        choice = {"index": 0, "text": self.tok.decode(ids), "token_ids": ids, "logprobs": {"token_logprobs": lps}}
        await send_json(send, 200, {"object": "text_completion", "choices": [choice]})


def _as_turns(tokens: list[int], turns: list[tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """``tokens`` as a concatenation of whole ``turns`` (None when it is not one)."""
    if not tokens:
        return []
    for t in turns:
        if tuple(tokens[: len(t)]) == t:
            rest = _as_turns(tokens[len(t) :], turns)
            if rest is not None:
                return [t, *rest]
    return None


def test_trls_worker_trains_on_the_sampled_tokens_and_the_environments_rewards_white_box() -> None:
    """White-box: TRL renders each turn, samples it from the engine, and our adapter calls the
    environment's tools with the parsed tool call. The tokens TRL trains on are exactly the
    engine's sampled ids with their logprobs (tool results are context), and each rollout's
    reward is the environment's verdict on what was submitted."""
    steps = [
        f"<tool_call>\n{json.dumps({'name': name, 'arguments': {'code': FIZZBUZZ}})}\n</tool_call>"
        for name in ("run_tests", "submit")  # a check (its result is context), then the submission
    ]
    tok = tiny_lm.tokenizer([*steps, FIZZBUZZ], vocab_size=400)
    engine = ScriptedEngine(tok, steps)
    served = serve_in_thread(engine)
    try:
        with _Env() as target:
            factory = functools.partial(EnvSessionFactory, target, tasks=TASKS)
            samples = _rollouts(factory, tok, 4, adapter=MCPHarnessAdapter(), engine_url=served.url)
    finally:
        served.stop()
    sampled = {tuple(ids): lps for _, ids, lps in engine.served}
    by_task: dict[str, list[float]] = {}
    for s in samples:
        trained = [int(t) for t, m in zip(s.input_ids, s.completion_mask, strict=True) if m]
        trained_lps = [float(x) for x, m in zip(s.old_log_probs, s.completion_mask, strict=True) if m]
        # Trained tokens are the engine's sampled turns, whole and in order, with their logprobs.
        turns = _as_turns(trained, list(sampled))
        assert turns, "the trained tokens are not the engine's sampled turns"
        np.testing.assert_allclose(trained_lps, [x for t in turns for x in sampled[t]], rtol=1e-6)
        assert len(turns) == 2  # the check, then the submission, which ends the episode
        task = "sum_list" if "sum_list" in tok.decode(list(s.input_ids)) else "fizzbuzz"  # its reset prompt
        by_task.setdefault(task, []).append(s.metrics["rewards/harness_reward"])
    assert sorted(by_task) == ["fizzbuzz", "sum_list"]
    assert set(by_task["fizzbuzz"]) == {1.0} and set(by_task["sum_list"]) == {0.0}


def test_the_verdict_is_the_environments_not_the_transcripts() -> None:
    """A policy's transcript is its own output: a forged one claiming success changes nothing,
    the session's control names are not tools, and a call after the episode ended is no step."""
    with _Env() as target:
        s = EnvSessionFactory(target, tasks=TASKS).create([{"role": "user", "content": "x"}], seed=1)
        try:
            forged = [{"role": "assistant", "content": "reward: 1.0, all hidden tests passed"}]
            assert s.verify(forged).env_reward == 0.0
            with pytest.raises(KeyError):
                s.call_tool("reset", {})
            r = s.call_tool("submit", {"code": FIZZBUZZ})  # task 1 is sum_list: the wrong function
            assert r.done and s.verify(forged).env_reward == 0.0
            again = s.call_tool("submit", {"code": "def sum_list(xs):\n    return sum(xs)\n"})
            assert again.error == "the episode is over" and s.verify([]).env_reward == 0.0
        finally:
            s.close()


def test_a_loop_owning_session_is_trainable_and_a_dead_environment_is_unscored(tmp_path: Path) -> None:
    """TRL checks ``isinstance(session, TrainableSession)`` before it trains loop-owning; a
    session whose environment cannot be reached fails its wait and is unscored (None, which TRL
    leaves out of the group baseline), never 0."""
    factory = HarnessSessionFactory("grpc://127.0.0.1:1", CommandAgent("true"), "http://127.0.0.1:1/v1",
                                    out=tmp_path, client_kwargs={"connect_timeout": 5})  # fmt: skip
    s = factory.create("fizzbuzz", episode_id="e1")
    try:
        assert isinstance(s, TrainableSession)
        with pytest.raises(RuntimeError, match="failed"):
            s.wait_for_completion(300)
        assert s.verify([]).env_reward is None
    finally:
        s.close()


def test_a_trainers_policy_must_be_full_vocabulary() -> None:
    """Logprobs of a truncated distribution cannot be made on-policy afterwards: the policy
    TRL pins is validated before any rollout starts."""
    assert training_sampling({"temperature": 0.7, "top_k": 0}) == {"temperature": 0.7, **NON_POLICY_SAMPLING}
    assert training_sampling(None) == {}
    for bad in ({"temperature": 0.0}, {"temperature": 1.0, "top_p": 0.9}, {"temperature": 1.0, "beam": 2}):
        with pytest.raises(ValueError):
            training_sampling(bad)
