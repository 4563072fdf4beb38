"""TRL's GRPOTrainer trains through a live server: math_env (a tool environment in this repo)
served over gRPC, a tiny Qwen2 model and tokenizer built on the spot (tiny_lm), and
``openenv.trl.environment_factory``. The rollouts' tool calls are steps of real sessions, the
rewards are the environment's rubric scores, and the optimiser moves the weights.

The test asserts what cannot be faked: the server opened sessions and scored submissions for
the tasks the dataset named (Task API), the trainer logged those rewards (non-null, not all
equal, so GRPO had an advantage to follow), tool calls were made, and parameters changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tiny_lm
import torch
from datasets import Dataset
from openenv_testkit import server_thread
from trl import GRPOConfig, GRPOTrainer

import openenv
import openenv.trl
from math_env.server import MathEnvironment
from math_env.tasks import TASKS

TASK = "5"  # every row (and so every GRPO group) plays this task, chosen through the Task API
PROMPT = "Use the tools.\n"


def _call(answer: int) -> str:
    return f'<tool_call>\n{{"name": "submit_answer", "arguments": {{"answer": "{answer}"}}}}\n</tool_call><|im_end|>'


def test_grpo_trains_a_tiny_model_on_rewards_from_a_live_server(tmp_path: Path) -> None:
    with server_thread(MathEnvironment) as srv:
        factory = openenv.trl.environment_factory(srv.address)
        try:
            probe = factory()
            tools = [getattr(probe, t.name) for t in factory.tools]
            question = probe.reset(task_id=TASK)  # what TRL appends to the prompt
            assert question is not None
            answer = TASKS[int(TASK)].answer
            completions = [_call(answer), _call(answer + 1)]  # a right and a wrong submission
            msgs = [{"role": "user", "content": PROMPT + question}]
            prompt = tiny_lm.tokenizer([]).apply_chat_template(
                msgs, tools=tools, add_generation_prompt=True, tokenize=False
            )
            tok = tiny_lm.tokenizer([prompt, *completions] * 20)
            lm = tiny_lm.model(tok)
            pairs = [(prompt, c) for c in completions]
            assert tiny_lm.warm_up(lm, tok, pairs) < 1.0
            before = {n: p.detach().clone() for n, p in lm.named_parameters()}
            opened = srv.manager.opened_total

            data = Dataset.from_dict({"prompt": [[{"role": "user", "content": PROMPT}]] * 2, "task_id": [TASK] * 2})
            args = GRPOConfig(
                output_dir=str(tmp_path),
                max_steps=2,
                per_device_train_batch_size=4,
                num_generations=4,
                max_completion_length=48,
                max_tool_calling_iterations=1,
                learning_rate=1e-3,
                logging_steps=1,
                save_strategy="no",
                report_to="none",
                use_cpu=True,
                seed=0,
                shuffle_dataset=False,
            )
            trainer = GRPOTrainer(
                model=lm, args=args, train_dataset=data, processing_class=tok, environment_factory=factory
            )
            trainer.train()
        finally:
            factory.close()
        logs = [h for h in trainer.state.log_history if "reward" in h]
        assert len(logs) >= 2 and trainer.state.global_step >= 2
        key = f"rewards/{factory.cls.__name__}/mean"
        assert all(h[key] is not None and h["reward"] == h["reward"] for h in logs)  # logged, not NaN
        assert any(h["tools/call_frequency"] > 0 for h in logs)
        # The rewards are the server's: its sessions scored submissions of the named task.
        assert srv.manager.opened_total > opened
        calls = [c for r in trainer._environment_pool[None] for c in r.tool_calls]
        assert any(name == "submit_answer" for name, _ in calls)
        rewards = [r.get_reward() for r in trainer._environment_pool[None]]
        assert len(set(rewards)) > 1, rewards  # right and wrong answers were told apart by the rubric
        assert {r.task_id for r in trainer._environment_pool[None]} == {TASK}
        changed = [n for n, p in lm.named_parameters() if not torch.equal(p.detach(), before[n])]
        assert changed, "GRPO steps left every parameter unchanged"


class Shout(openenv.Environment):
    """A multi-turn text environment (not tool-shaped): two turns, each rewarded by the share
    of capital letters in the model's text."""

    action_type = str
    observation_type = str
    max_episode_steps = 2

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> str:
        self.seed = seed
        return "Shout something."

    def step(self, action: str) -> openenv.StepResult:
        letters = [c for c in action if c.isalpha()]
        share = sum(c.isupper() for c in letters) / len(letters) if letters else 0.0
        return openenv.StepResult(f"You said {len(action)} characters. Again.", reward=share)


def test_grpo_with_a_rollout_func_plays_a_multi_turn_text_environment(tmp_path: Path) -> None:
    corpus = ["Shout something.", "HELLO there", "hello THERE", "You said 11 characters. Again."] * 20
    tok = tiny_lm.tokenizer(corpus)
    lm = tiny_lm.model(tok)
    before = {n: p.detach().clone() for n, p in lm.named_parameters()}
    with server_thread(Shout) as srv:
        opened = srv.manager.opened_total
        data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Go. "}]] * 2})
        args = GRPOConfig(
            output_dir=str(tmp_path),
            max_steps=2,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=24,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=0,
        )
        trainer = GRPOTrainer(
            model=lm,
            reward_funcs=[openenv.trl.env_reward],
            args=args,
            train_dataset=data,
            processing_class=tok,
            rollout_func=openenv.trl.rollout_func(srv.address, max_turns=2, max_new_tokens_per_turn=8),
        )
        trainer.train()
        assert srv.manager.opened_total - opened >= 8  # one session per completion, 2 steps x 4
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) >= 2 and all(h["rewards/env_reward/mean"] == h["rewards/env_reward/mean"] for h in logs)
    assert any(h["reward_std"] > 0 for h in logs)  # random text: the environment told completions apart
    assert any(not torch.equal(p.detach(), before[n]) for n, p in lm.named_parameters())
