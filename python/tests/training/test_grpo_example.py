"""GRPO learns through the wire on a laptop: examples/grpo_count.py trains TRL's GRPOTrainer on
the CPU, with a model and tokenizer built locally (nothing downloaded), on a task served over
gRPC by the example's own environment. ``make test`` runs 2 steps (the plumbing: episodes
played on the server, its rewards logged, the PNG and JSON written); ``make docs-check``
(OPENENV_DOCS_CHECK=1) runs the documented 100 steps and asks for the rise docs/training.md
states."""

from __future__ import annotations

import importlib.util
import json
import os
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from openenv_testkit import REPO_ROOT, server_thread

RISE = 0.25
"""The mean reward of the last 20 steps exceeds that of the first 20 by this much (a random
reply scores about 0.05; the documented run goes from 0.11 to 0.76)."""


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grpo_count", REPO_ROOT / "examples" / "grpo_count.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_environment_scores_counting_on_from_its_digit() -> None:
    """The reward is the environment's rule: a quarter point per character that is one more
    (mod 10) than the one before it, the first compared with the digit shown."""
    example = _example()
    env = example.Count()
    shown = env.reset(seed=3)
    start = int(shown)
    right = "".join(str((start + k) % 10) for k in range(1, 5))
    assert env.step(right).reward == 1.0
    assert env.step(right[:2] + "x" + right[3]).reward == 0.5
    assert env.step("").reward == 0.0


@pytest.mark.slow
def test_grpo_example_trains_on_rewards_from_its_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two steps: 64 episodes, each a session of the server, whose rewards GRPO logs. The run
    says what it does before the libraries load and after the first step, and raises none of
    the FutureWarnings about TRL's calls into transformers (before: four, and 90 s of nothing
    else on a busy machine)."""
    example = _example()
    with server_thread(example.Count) as srv, warnings.catch_warnings(record=True) as caught:
        result = example.train(srv.address, steps=2, out=tmp_path, seed=0)
        assert srv.manager.opened_total >= 2 * 32
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("loading torch, transformers and TRL")
    assert any(line.startswith("step    1/2  mean reward") for line in printed)
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]
    assert len(result["mean_reward_per_step"]) == 2
    assert all(0.0 <= r <= 1.0 for r in result["mean_reward_per_step"])
    assert (tmp_path / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "rewards.json").read_text())["episodes_per_step"] == 32


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("OPENENV_DOCS_CHECK") != "1", reason="minutes: make docs-check runs it")
def test_grpo_raises_the_mean_reward_as_documented(tmp_path: Path) -> None:
    example = _example()
    with example.local_server() as url:
        result = example.train(url, steps=100, out=tmp_path, seed=0)
    rewards = result["mean_reward_per_step"]
    first, last = sum(rewards[:20]) / 20, sum(rewards[-20:]) / 20
    assert last > first + RISE, (first, last)
