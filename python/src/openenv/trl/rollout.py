"""Multi-turn text environments as TRL ``GRPOTrainer(rollout_func=...)`` rollouts.

For environments that are not tool-shaped (the action is the model's text), :func:`rollout_func`
plays one episode per completion: the prompt plus the reset observation is tokenised with the
chat template, the trainer's model generates a turn, the decoded text is the step's action, the
observation is appended as (masked) feedback tokens, and so on until the episode ends, the
turns run out or the completion budget is spent. It returns what TRL requires
(``prompt_ids``, ``completion_ids``, ``logprobs``), ``env_mask`` (1 for the model's tokens, 0 for
the environment's) and ``env_reward`` (the episode's return), which :func:`env_reward` hands to
the trainer as a reward function.

The completions of one prompt in one optimisation step play the same episode: same seed
(derived from the prompt and the step) and, with ``task_from_prompt``, the same task.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from openenv.client import EnvClient
from openenv.protocol import StepResult

__all__ = ["env_reward", "rollout_func"]


def _text(value: Any) -> str:
    result = getattr(value, "result", None)
    if result is not None:
        return str(result.text)
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _messages(prompt: Any) -> list[dict[str, Any]]:
    return list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


def env_reward(completions: list[Any], env_reward: list[float] | None = None, **kwargs: Any) -> list[float | None]:
    """A TRL reward function returning the environment's episode returns that
    :func:`rollout_func` recorded (``reward_funcs=[openenv.trl.env_reward]``)."""
    if env_reward is None:
        return [None] * len(completions)
    return [float(r) for r in env_reward]


def rollout_func(
    target: str,
    *,
    max_turns: int = 4,
    max_new_tokens_per_turn: int | None = None,
    to_action: Callable[[str], Any] = str,
    to_text: Callable[[Any], str] = _text,
    task_from_prompt: Callable[[Any], str | None] | None = None,
    client_kwargs: dict[str, Any] | None = None,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``rollout_func`` for ``GRPOTrainer`` over the environment at ``target``, whose actions
    are the model's text (``to_action`` converts it; ``to_text`` renders observations)."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        import torch

        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        budget = int(trainer.max_completion_length)
        per_turn = max_new_tokens_per_turn or budget
        temperature = float(getattr(trainer, "temperature", 1.0) or 1.0)
        step = int(trainer.state.global_step)
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        out["env_reward"] = []
        for prompt in prompts:
            key = json.dumps(prompt, sort_keys=True, default=str)
            seed = int.from_bytes(hashlib.sha256(f"{key}|{step}".encode()).digest()[:6], "little")
            task_id = task_from_prompt(prompt) if task_from_prompt else None
            with EnvClient(target, **(client_kwargs or {})).sync() as env:
                r: StepResult[Any] = env.reset(seed, None, None, task_id=task_id)
                msgs = _messages(prompt)
                first = to_text(r.observation)
                if first:
                    msgs = [*msgs[:-1], {**msgs[-1], "content": f"{msgs[-1]['content']}{first}"}]
                enc = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)
                prompt_ids = [int(t) for t in enc["input_ids"]]
                ids: list[int] = []
                logprobs: list[float] = []
                mask: list[int] = []
                total = 0.0
                for _ in range(max_turns):
                    room = min(per_turn, budget - len(ids))
                    if room <= 0 or r.done:
                        break
                    context = torch.tensor([prompt_ids + ids])
                    with torch.no_grad():
                        gen = model.generate(
                            input_ids=context,
                            attention_mask=torch.ones_like(context),
                            do_sample=True,
                            temperature=temperature,
                            max_new_tokens=room,
                            pad_token_id=tok.pad_token_id,
                            output_scores=True,
                            return_dict_in_generate=True,
                        )
                        scores = model.compute_transition_scores(gen.sequences, gen.scores, normalize_logits=True)
                    new = gen.sequences[0, context.shape[1] :].tolist()
                    ids += new
                    logprobs += [float(x) for x in scores[0, : len(new)]]
                    mask += [1] * len(new)
                    r = env.step(to_action(tok.decode(new, skip_special_tokens=True)))
                    total += float(r.reward or 0.0)
                    if r.done:
                        break
                    feedback = tok(f"\n{to_text(r.observation)}\n", add_special_tokens=False)["input_ids"]
                    feedback = feedback[: max(0, budget - len(ids))]
                    ids += feedback
                    logprobs += [0.0] * len(feedback)
                    mask += [0] * len(feedback)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            out["env_reward"].append(total)
        return out

    return rollout
