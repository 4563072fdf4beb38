#!/usr/bin/env python3
"""A loop-owning agent learns on a laptop: policy gradient from captured harness traces, on the CPU.

Nothing is downloaded. The policy is a 2-layer Qwen2 with random weights built from a config and
a character-level tokenizer built on the spot (those of ``grpo_count.py``), served by a small
OpenAI-compatible chat server of this example that samples on the CPU and returns the prompt's
and the completion's token ids and each sampled token's logprob, as vLLM does.

The task is a harness task: :class:`CountTool` (openenv, served over gRPC on loopback) shows a
digit (``count 7``) and has one tool, ``answer(reply)``, which scores how far the reply counts on
from the digit (a half point for each of its first two characters that is one more than the one
before it, mod 10) and ends the episode. The agent is our own minimal one, run by ``openenv
harness run``'s runner in its jail like any harness: it reads its task, asks the model through
the capture proxy, and calls ``envtool answer``.

Each step: 4 digits x 4 episodes through :func:`openenv.harness.run_harness` (the trainer's
sampling policy pinned by the proxy); the episodes' RFC 0017 training traces
(:func:`openenv.harness.training_traces`: the server's token ids and logprobs, the environment's
rewards); a policy-gradient update (advantages normalised per digit, as GRPO's groups); then the
served weights are refreshed from the trained ones. The run writes ``rewards.json`` (the mean
reward of every step) and ``reward_curve.png`` to ``--out``.

    python examples/harness_count.py --out build/harness-count            # 40 steps: minutes on 2 cores
    python examples/harness_count.py --steps 2 --out build/harness-smoke  # the plumbing only
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from grpo_count import model as build_model
from grpo_count import tokenizer as build_tokenizer

import openenv

LENGTH = 2  # the reply's scored characters
TASKS = ["3", "7"]  # two digits: each step plays both, so both are learnt in tens of steps
DIGITS_PER_STEP, EPISODES_PER_DIGIT = 2, 8

AGENT = r"""
import json, os, subprocess, urllib.request
task = open(os.environ["OPENENV_PROMPT_FILE"]).read().splitlines()[0]   # "count 7"
body = {"model": os.environ["OPENENV_MODEL"], "messages": [{"role": "user", "content": task + " "}],
        "max_tokens": MAX_TOKENS}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
                             {"content-type": "application/json", "authorization": "Bearer x"})
reply = json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["message"]["content"]
subprocess.run([os.environ["OPENENV_ENVTOOL"], "answer", "--json", json.dumps({"reply": reply})], check=True)
""".replace("MAX_TOKENS", str(LENGTH))


class CountTool(openenv.Environment):
    """Show a digit (the task); ``answer(reply)`` scores the reply's first two characters."""

    max_episode_steps = 4
    reward_range = (0.0, 1.0)
    task_splits: ClassVar[dict[str, str]] = {"train": "the digits 3 and 7"}

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        return [openenv.TaskInfo(d, "train", {}) for d in TASKS] if split == "train" else []

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> Any:
        task = (options or {}).get("task_id")
        self.digit = str(task) if task in TASKS else random.Random(seed).choice(TASKS)
        self.score: float | None = None
        text = f"count {self.digit}\nReply by calling the tool answer(reply)."
        return openenv.StepResult(openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}])))

    @openenv.tool(grades=True)
    def answer(self, reply: str) -> str:
        """Answer; ends the episode.

        Args:
            reply: the characters that count on from the digit.
        """
        right, previous = 0, self.digit
        for c in reply[:LENGTH]:
            right += c.isdigit() and previous.isdigit() and int(c) == (int(previous) + 1) % 10
            previous = c
        self.score = right / LENGTH
        return f"{right} of {LENGTH}"

    def finish_tool_step(self, action: Any, observation: Any) -> openenv.StepResult:
        done = self.score is not None
        return openenv.StepResult(observation, reward=self.score or 0.0, terminated=done)


def banned(tok: Any) -> Any:
    """The policy's vocabulary is the alphabet: the special tokens are never sampled (a reply is
    always ``max_tokens`` characters), in serving and in training alike, so both see one
    distribution."""
    import torch

    mask = torch.zeros(len(tok), dtype=torch.bool)
    mask[tok.all_special_ids] = True
    return mask


class PolicyServer:
    """A minimal OpenAI-compatible chat server (ASGI) sampling from a torch causal LM on the CPU:
    the prompt is the messages' text; it returns ``prompt_token_ids``, the choice's ``token_ids``
    and ``logprobs.content`` (the sampled tokens' logprobs at the request's temperature)."""

    def __init__(self, lm: Any, tok: Any) -> None:
        self.lm, self.tok = lm, tok
        self.banned = banned(tok)
        self.lock = threading.Lock()
        self.version = 0

    def refresh(self, state: dict[str, Any]) -> None:
        """Load trained weights (the next request samples from them)."""
        with self.lock:
            self.lm.load_state_dict(state)
            self.version += 1

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        import torch

        text = "".join(str(m.get("content") or "") for m in body.get("messages") or [])
        prompt = self.tok(text)["input_ids"]
        temperature = float(body.get("temperature") or 1.0)
        ids, lps = list(prompt), []
        with self.lock, torch.no_grad():
            for _ in range(int(body.get("max_tokens") or LENGTH)):
                logits = self.lm(input_ids=torch.tensor([ids])).logits[0, -1] / temperature
                logp = torch.log_softmax(logits.masked_fill(self.banned, -math.inf), -1)
                t = int(torch.multinomial(logp.exp(), 1))
                ids.append(t)
                lps.append(float(logp[t]))
            version = self.version
        out = ids[len(prompt) :]
        content = self.tok.decode([t for t in out if t != self.tok.eos_token_id])
        lp_content = [{"token": self.tok.decode([t]), "logprob": lp} for t, lp in zip(out, lps, strict=True)]
        choice = {
            "index": 0, "finish_reason": "stop", "token_ids": out,
            "message": {"role": "assistant", "content": content},
            "logprobs": {"content": lp_content},
        }  # fmt: skip
        return {"id": f"c{time.time_ns()}", "object": "chat.completion", "model": f"policy-v{version}",
                "prompt_token_ids": prompt, "choices": [choice]}  # fmt: skip

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if scope["path"].rstrip("/").endswith("/chat/completions"):
            status, out = 200, await asyncio.to_thread(self.complete, json.loads(body))
        else:
            status, out = 404, {"error": {"message": "not found"}}
        data = json.dumps(out).encode()
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": data})


def _serve_env() -> tuple[str, Any]:
    loop = asyncio.new_event_loop()
    srv, started = openenv.Server(CountTool, "127.0.0.1", 0), threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        started.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    if not started.wait(60):
        raise RuntimeError("the CountTool server did not start")

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)

    return str(srv.address), stop


def train(steps: int, out: Path, seed: int = 0, learning_rate: float = 1e-2) -> dict[str, Any]:
    """``steps`` policy-gradient steps of 16 harness episodes; writes the JSON (and the PNG)."""
    import torch

    from openenv.core.harness.capture.upstream import training_sampling
    from openenv.harness import CommandAgent, run_harness, serve_in_thread, training_traces

    torch.set_num_threads(1)  # a model this small is faster single-threaded on a busy machine
    random.seed(seed)
    tok = build_tokenizer()
    lm = build_model(tok, seed)
    served = PolicyServer(copy.deepcopy(lm), tok)
    http = serve_in_thread(served)
    target, stop_env = _serve_env()
    out.mkdir(parents=True, exist_ok=True)
    agent_file = Path(tempfile.mkdtemp(prefix="harness-count-")) / "agent.py"
    agent_file.write_text(AGENT)
    agent = CommandAgent(f"{sys.executable} -I {agent_file}")
    opt = torch.optim.AdamW(lm.parameters(), lr=learning_rate)
    ban = banned(tok)
    policy = training_sampling({"temperature": 1.0})
    rewards: list[float] = []
    t0 = time.monotonic()
    try:
        for step in range(steps):
            digits = random.sample(TASKS, DIGITS_PER_STEP)  # both, in a random order
            tasks = [d for d in digits for _ in range(EPISODES_PER_DIGIT)]
            run_dir = out / "runs" / f"step-{step:04d}"
            rows = asyncio.run(
                run_harness(
                    target,
                    agent,
                    tasks,
                    f"{http.url}/v1",
                    run_dir,
                    model="policy",
                    concurrency=4,
                    time_budget_s=300,
                    request_tokens=True,
                    sampling=policy,
                )
            )
            traces = training_traces(run_dir)
            groups: dict[str, list[Any]] = {}
            for t in traces:
                if t.HasField("reward") and t.turns:
                    groups.setdefault(t.task_id, []).append(t)
            lm.train()
            opt.zero_grad()
            loss_terms = []
            for group in groups.values():
                rs = [t.reward for t in group]
                mean, std = statistics.fmean(rs), statistics.pstdev(rs)
                for t in group:
                    adv = (t.reward - mean) / (std + 1e-4)
                    for turn in t.turns:
                        p, c = list(turn.prompt_token_ids), list(turn.completion_token_ids)
                        ids = torch.tensor([p + c])
                        logits = lm(input_ids=ids).logits[0, len(p) - 1 : -1].masked_fill(ban, -math.inf)
                        logp = torch.log_softmax(logits, -1)
                        taken = logp[torch.arange(len(c)), torch.tensor(c)]
                        mask = torch.tensor(list(turn.loss_mask[len(p) :]), dtype=torch.float32)
                        loss_terms.append(-adv * (taken * mask).sum())
            if loss_terms:
                (torch.stack(loss_terms).sum() / len(loss_terms)).backward()
                opt.step()
            served.refresh(copy.deepcopy(lm.state_dict()))  # the served weights are the trained ones
            mean_reward = statistics.fmean(r["reward"] for r in rows)
            rewards.append(mean_reward)
            print(f"step {step + 1}/{steps} mean reward {mean_reward:.3f} episodes {len(rows)} "
                  f"served v{served.version} {time.monotonic() - t0:.0f}s", flush=True)  # fmt: skip
    finally:
        http.stop()
        stop_env()
    window = max(1, min(10, len(rewards) // 4))
    result = {
        "steps": steps, "episodes_per_step": len(TASKS[:DIGITS_PER_STEP]) * EPISODES_PER_DIGIT, "seed": seed,
        "rewards": rewards, "first_window": statistics.fmean(rewards[:window]),
        "last_window": statistics.fmean(rewards[-window:]), "seconds": round(time.monotonic() - t0, 1),
    }  # fmt: skip
    (out / "rewards.json").write_text(json.dumps(result, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(range(1, len(rewards) + 1), rewards, lw=1)
        ax.set(xlabel="step (16 harness episodes)", ylabel="mean reward", ylim=(0, 1),
               title="A loop-owning agent learns from captured traces")  # fmt: skip
        fig.tight_layout()
        fig.savefig(out / "reward_curve.png", dpi=100)
    except ImportError:
        pass
    assert all(math.isfinite(r) for r in rewards)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--out", type=Path, default=Path("build/harness-count"))
    a = ap.parse_args()
    r = train(a.steps, a.out, a.seed, a.lr)
    print(json.dumps({k: v for k, v in r.items() if k != "rewards"}))


if __name__ == "__main__":
    main()
