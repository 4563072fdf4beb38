"""A tiny causal language model and tokenizer built on the spot (nothing is downloaded), for
the TRL tests: a byte-level BPE tokenizer trained on the texts the test will use, with TRL's
copy of the Qwen2.5 chat template (tool calling, and a response parser TRL knows), and a
2-layer Qwen2 model with random weights, warmed up by a few supervised steps so that it
emits tool calls at all (a random network almost never writes ``<tool_call>...``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl.chat_template_utils import qwen2_5_chat_template

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tokenizer(corpus: Sequence[str], vocab_size: int = 1000) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    # No regex split: merges may span words and punctuation, so the texts the test repeats
    # (its prompt, the tool calls) become a few tokens each and every step stays cheap.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    out.add_tokens(["<tool_call>", "</tool_call>"])  # as in Qwen's own tokenizers
    out.chat_template = qwen2_5_chat_template
    return out


def model(tok: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2ForCausalLM:
    # One thread: on a loaded 2-core machine, torch's thread pool spin-waits and a step of this
    # tiny model takes 20x longer with two threads than with one.
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def warm_up(
    lm: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, pairs: Sequence[tuple[str, str]], steps: int = 80
) -> float:
    """Supervised steps on (prompt, completion) texts, loss on the completion only; returns
    the last loss."""
    opt = torch.optim.AdamW(lm.parameters(), lr=3e-3)
    rows = []
    for prompt, completion in pairs:
        p, c = tok(prompt)["input_ids"], tok(completion)["input_ids"]
        rows.append((torch.tensor([p + c]), torch.tensor([[-100] * len(p) + c])))
    lm.train()
    loss = torch.tensor(0.0)
    for step in range(steps):
        ids, labels = rows[step % len(rows)]
        loss = lm(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())
