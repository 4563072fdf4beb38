"""A loop-owning agent learns on a laptop: examples/harness_count.py runs a jailed agent through
``openenv harness run``'s runner against a tiny CPU model served by the example's own
OpenAI-compatible server, turns the captured episodes into RFC 0017 training traces, updates the
policy from them and refreshes the served weights. ``make test`` runs 2 steps (the plumbing);
``make docs-check`` (OPENENV_DOCS_CHECK=1) runs the documented 40 steps and asks for the rise
docs/training.md states."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from openenv_testkit import REPO_ROOT

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")

RISE = 0.2
"""The mean reward of the last 10 steps exceeds that of the first 10 by this much."""


def _example() -> ModuleType:
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    try:
        import harness_count

        return harness_count
    finally:
        sys.path.remove(str(REPO_ROOT / "examples"))


def test_the_served_policy_returns_its_token_ids_and_logprobs_and_takes_new_weights() -> None:
    """The example's model server is what a trainer needs from vLLM: the prompt's and the
    completion's token ids and the sampled tokens' logprobs; refreshed weights change what it
    samples from (the version it reports)."""
    import torch

    ex = _example()
    tok = ex.build_tokenizer()
    lm = ex.build_model(tok, 0)
    server = ex.PolicyServer(lm, tok)
    out = server.complete({"messages": [{"role": "user", "content": "count 7 "}], "max_tokens": 2})
    choice = out["choices"][0]
    assert out["prompt_token_ids"] == tok("count 7 ")["input_ids"] and 1 <= len(choice["token_ids"]) <= 2
    assert [c["logprob"] <= 0 for c in choice["logprobs"]["content"]] == [True] * len(choice["token_ids"])
    state = {k: torch.zeros_like(v) for k, v in lm.state_dict().items()}
    server.refresh(state)
    assert (
        out["model"] == "policy-v0"
        and server.complete({"messages": [{"role": "user", "content": "count 3 "}]})["model"] == "policy-v1"
    )


@pytest.mark.slow
def test_the_harness_example_trains_from_captured_traces(tmp_path: Path) -> None:
    """Two steps: 32 jailed harness episodes, their traces, two updates, the JSON and PNG."""
    ex = _example()
    result = ex.train(steps=2, out=tmp_path, seed=0)
    assert len(result["rewards"]) == 2 and all(0.0 <= r <= 1.0 for r in result["rewards"])
    assert json.loads((tmp_path / "rewards.json").read_text())["steps"] == 2
    assert len(list((tmp_path / "runs").iterdir())) == 2


@pytest.mark.skipif(not os.environ.get("OPENENV_DOCS_CHECK"), reason="the documented 40 steps: make docs-check")
def test_the_documented_run_rises(tmp_path: Path) -> None:
    """The run docs/training.md reports: the reward rises by RISE."""
    result = _example().train(steps=40, out=tmp_path, seed=0)
    assert result["last_window"] - result["first_window"] >= RISE, result
