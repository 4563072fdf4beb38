"""examples/selfplay.py and its benchmark (tools/bench/selfplay.py) end to end, small: a tabular
agent trains by self-play over one multi-agent gRPC session on loopback, then plays a random
opponent from each seat. Everything is seeded and tic-tac-toe has no chance, so the figures are
the same on every run however loaded the machine: after 200 games the agent already scores
better than a random player from the first seat. ``make bench`` runs 5000 games."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem + "_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_self_play_trains_an_agent_that_beats_random_play_from_the_first_seat(tmp_path: Path) -> None:
    example = _load(ROOT / "examples" / "selfplay.py")
    bench = _load(ROOT / "tools" / "bench" / "selfplay.py")
    result = example.main(["--games", "200", "--eval-games", "40", "--seed", "0", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "results.json").read_text()) == result
    assert result["training_games"] == 200 and set(result["trained_vs_random"]) == {"x", "o"}
    trained, baseline = result["trained_vs_random"]["x"], result["random_vs_random"]["x"]
    assert abs(sum(trained[k] for k in ("win", "draw", "loss")) - 1) < 1e-9
    assert trained["win"] > baseline["win"] and bench.score(trained) > bench.score(baseline), result
    assert result["states_learned"] > 100
