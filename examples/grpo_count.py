#!/usr/bin/env python3
"""GRPO through the wire on a laptop: TRL's GRPOTrainer learns a task served over gRPC, on the CPU.

Nothing is downloaded. The model is a 2-layer Qwen2 with random weights, built from a config;
the tokenizer is character-level (digits, a space and the letters of "count"), built on the spot.
The task is an openenv environment, :class:`Count`, served on loopback in a thread (or any
server of it, ``--url``): each episode shows a digit, the model replies, and the reply should
count on from it, wrapping after 9 (after "7": "8901"). Each of the reply's first four
characters that is one more than the character before it (the first: than the shown digit)
earns a quarter point, 0 to 1. A random reply scores about 0.05.

``openenv.trl.rollout_func`` plays one episode per completion (one session each, over gRPC),
and ``openenv.trl.env_reward`` hands the environment's reward to GRPO. The run writes
``reward_curve.png`` and ``rewards.json`` (the mean reward of every step) to ``--out``. Each
step plays 4 prompts (4 digits) x 8 completions (a GRPO group per digit). The run prints
from its first second: while the libraries load, then every other step.

    pip install torch==2.13.0 './python[trl]'       # from a clone's root: CPU torch first; [trl] has matplotlib
    python examples/grpo_count.py --out build/grpo                  # 100 steps: about a minute of 2 cores
    python examples/grpo_count.py --steps 2 --out build/grpo-smoke  # seconds: the plumbing only

To play a server you run yourself: ``PYTHONPATH=examples openenv serve grpo_count:Count --port 50051``,
then ``python examples/grpo_count.py --url grpc://127.0.0.1:50051``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import openenv

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.x
# TRL calls transformers' gradient_checkpointing* names, which transformers 5 renamed: four
# FutureWarnings about the libraries' code, none about this script (other warnings still show).
warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)

LENGTH = 4  # the characters of a reply that are scored
PROMPT = "count "  # the dataset's prompt; the environment appends its digit
ALPHABET = "0123456789 count"  # what the prompt is written in, and what a reply can say
GROUPS, GENERATIONS = 4, 8  # per step: 4 prompts (4 episodes' digits), 8 completions of each
ROWS_FOR = 200  # the dataset holds the prompts of this many steps (see train)
# The chat template: the messages' text, nothing else ("count 7"), so the reply follows the digit.
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


class Count(openenv.Environment):
    """Show a digit (drawn from the episode's seed); score the reply by how far it counts on
    from it: a quarter point per character of its first four that is one more (mod 10) than
    the one before it. One step per episode."""

    action_type = str
    observation_type = str
    max_episode_steps = 1
    reward_range = (0.0, 1.0)

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> str:
        self.digit = str(random.Random(seed).randrange(10))
        return self.digit

    def step(self, action: str) -> openenv.StepResult:
        right, previous = 0, self.digit
        for c in action[:LENGTH]:
            right += c.isdigit() and previous.isdigit() and int(c) == (int(previous) + 1) % 10
            previous = c
        return openenv.StepResult(f"{right} of {LENGTH}", reward=right / LENGTH, terminated=True)


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    """:class:`Count` served over gRPC on loopback, on an event loop in a thread."""
    loop = asyncio.new_event_loop()
    srv, started = openenv.Server(Count, "127.0.0.1", 0), threading.Event()

    def run() -> None:  # grpc.aio serves on the loop that started it: start it in the thread
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(60):
        raise RuntimeError("the Count server did not start")
    try:
        yield srv.address
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def tokenizer() -> Any:
    """A character-level tokenizer of :data:`ALPHABET`, built on the spot (no download)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {t: i for i, t in enumerate([*specials, *ALPHABET])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>", padding_side="left"
    )
    out.chat_template = TEMPLATE
    return out


def model(tok: Any, seed: int) -> Any:
    """A 2-layer Qwen2 (about 100k parameters) with random weights, from a config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def train(url: str, steps: int, out: Path, seed: int = 0, learning_rate: float = 3e-3) -> dict[str, Any]:
    """GRPO for ``steps`` optimisation steps (32 episodes each) against the server at ``url``;
    writes the PNG and the JSON; returns the JSON."""
    start = time.monotonic()
    print("loading torch, transformers and TRL (10-30 s on a laptop) ...", flush=True)
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    import openenv.trl

    print(f"loaded in {time.monotonic() - start:.0f} s; building the model and the trainer", flush=True)

    # One thread: a model this small is faster single-threaded, and a busy 2-core machine
    # makes torch's spinning thread pool many times slower.
    torch.set_num_threads(1)
    tok = tokenizer()
    lm = model(tok, seed)
    # The rows differ by an "id" the template does not show: rollout_func derives each episode's
    # seed from the prompt and the step, so the 4 groups of a step get 4 seeds (4 digits). The
    # dataset has the rows of ROWS_FOR steps whatever --steps is (the sampler's shuffle depends
    # on its size): a run of N steps plays the first N steps of the longer one, same curve.
    rows = max(steps, ROWS_FOR) * GROUPS
    prompts = [[{"role": "user", "content": PROMPT, "id": str(i)}] for i in range(rows)]
    args = GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=steps,
        per_device_train_batch_size=GROUPS * GENERATIONS,
        num_generations=GENERATIONS,  # a group: the completions of one prompt, one seed, one digit
        max_completion_length=LENGTH + 1,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,  # and no bf16: TRL's default (bf16=True) needs a GPU
        bf16=False,
        seed=seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=lm,
        reward_funcs=[openenv.trl.env_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
        rollout_func=openenv.trl.rollout_func(url, max_turns=1, max_new_tokens_per_turn=LENGTH + 1),
    )
    trainer.remove_callback(PrinterCallback)  # its line per step is the whole log dict: ours is shorter
    trainer.add_callback(_progress(steps))
    print(f"training: {steps} steps of {GROUPS * GENERATIONS} episodes against {url}", flush=True)
    start = time.monotonic()
    trainer.train()
    elapsed = time.monotonic() - start
    rewards = [float(h["reward"]) for h in trainer.state.log_history if "reward" in h]
    window = max(1, min(20, len(rewards) // 5))
    result = {
        "steps": steps,
        "episodes_per_step": GROUPS * GENERATIONS,
        "learning_rate": learning_rate,
        "seed": seed,
        "mean_reward_per_step": rewards,
        "first_window_mean": statistics.mean(rewards[:window]),
        "last_window_mean": statistics.mean(rewards[-window:]),
        "window": window,
        "train_seconds": round(elapsed, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "rewards.json").write_text(json.dumps(result, indent=1))
    _plot(rewards, window, out / "reward_curve.png")
    return result


def _progress(steps: int) -> Any:
    """A callback printing the mean reward every few steps (the run is never silent for long)."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.every, self.recent, self.start = max(1, steps // 40), [], time.monotonic()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                self.recent.append(float(logs["reward"]))
                if state.global_step in (1, state.max_steps) or state.global_step % self.every == 0:
                    mean = statistics.mean(self.recent)
                    elapsed = time.monotonic() - self.start
                    print(
                        f"step {state.global_step:>4}/{state.max_steps}  mean reward {mean:.3f}  ({elapsed:.0f} s)",
                        flush=True,
                    )
                    self.recent = []

    return Progress()


def _plot(rewards: Sequence[float], window: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    smooth = [statistics.mean(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))]
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = range(1, len(rewards) + 1)
    ax.plot(steps, rewards, alpha=0.3, label=f"mean reward of the step's {GROUPS * GENERATIONS} episodes")
    ax.plot(steps, smooth, label=f"mean of the last {window} steps")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_title("GRPO (TRL, CPU) on Count over gRPC: a 2-layer Qwen2 built locally")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a Count server (default: serve one on loopback)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--out", type=Path, default=Path("build/grpo_count"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server())
        result = train(url, args.steps, args.out, args.seed, args.learning_rate)
    print(json.dumps({k: result[k] for k in ("steps", "first_window_mean", "last_window_mean")}))
    print(f"wrote {args.out / 'reward_curve.png'} and {args.out / 'rewards.json'}")


if __name__ == "__main__":
    main()
