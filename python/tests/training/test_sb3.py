"""Classic RL learns through the wire: examples/sb3_gridworld.py trains Stable-Baselines3 PPO on
gridworld served over gRPC, 16 mazes in one vectorised session, and the trained policy beats a
random one on the same fixed seeds by a stated margin; the run writes its PNG and JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from openenv_testkit import REPO_ROOT, server_thread

from gridworld import GridWorldEnvironment

MARGIN = 0.3
"""Mean return over the 40 evaluation mazes: trained > random + MARGIN (random ~0.68, optimal ~1.34)."""


@pytest.mark.slow
def test_ppo_through_grpc_beats_a_random_policy(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("sb3_gridworld", REPO_ROOT / "examples" / "sb3_gridworld.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with server_thread(GridWorldEnvironment) as srv:
        result = example.train(srv.address, timesteps=20_000, out=tmp_path, seed=0)
    assert result["trained_mean"] > result["random_mean"] + MARGIN, result
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "returns.json").read_text())
    assert len(saved["trained_returns"]) == len(saved["random_returns"]) == 40
    assert len(saved["train_episode_returns"]) > 100  # episodes finished across the 16 instances
