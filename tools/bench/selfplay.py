"""Does self-play learn? (part of ``make bench``): the trained agent against a random opponent.

Runs ``examples/selfplay.py`` (tabular Monte Carlo self-play through one multi-agent session
over gRPC on loopback, RFC 0012) on openenv's reference tic-tac-toe with fixed seeds, then
scores the greedy agent against a uniformly random opponent from each seat, beside a random
agent from the same seats on the same opponent seeds (the baseline). The figures are win
rates, not times: the run is deterministic (a seeded learner, a game without chance), so a
machine's load changes how long it takes, never what it reports.

Prints one JSON object on its last line: per seat, the trained and the random agent's win,
draw and loss rates, and ``score_ratio``, the trained agent's score (win + draw/2) over the
random agent's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("selfplay_example", ROOT / "examples" / "selfplay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def score(rates: dict[str, float]) -> float:
    """Win = 1, draw = 1/2, loss = 0, averaged."""
    return rates["win"] + rates["draw"] / 2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="tictactoe")
    ap.add_argument("--games", type=int, default=5000, help="self-play training games")
    ap.add_argument("--eval-games", type=int, default=500, help="games against random, per seat")
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    result: dict[str, Any] = _example().main(
        ["--game", ns.game, "--games", str(ns.games), "--eval-games", str(ns.eval_games), "--seed", str(ns.seed)]
    )
    for seat, rates in result["trained_vs_random"].items():
        base = result["random_vs_random"][seat]
        rates["score_ratio"] = score(rates) / score(base) if score(base) else float("inf")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
