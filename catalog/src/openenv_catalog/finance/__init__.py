"""``finance-portfolio``: allocate a portfolio over five assets, one trading day at a time.

The market is ``prices.csv`` beside this module (five synthetic assets, daily closes from
2017-12-01 to 2023-12-29), made by the seeded ``make_prices.py`` beside it: shipped in the
package, read offline, the same everywhere.

**An episode** is a task: 63 trading days (a quarter) starting on the first trading day of a
month. Tasks are split by date range, so that a policy is tuned on the past and judged on
the future: ``train`` (windows inside 2018-2021), ``validation`` (2022) and ``test`` (2023); a
window never crosses its split's end. ``reset(options={"task_id": "2022-03"})`` (or
``ResetRequest.task_id``) picks one; without one, ``reset(seed=s)`` draws a train window.

**An action** is the target allocation: six non-negative numbers, the weights of INDX, TECH,
UTIL, BOND, CMDT and cash, normalised to sum to 1 (all zeros is all cash). The portfolio is
rebalanced at the day's close, paying ``transaction_cost`` (a handshake option, default 0.001,
i.e. 10 basis points) on the value traded, then holds until the next close.

**The observation** (JSON): the date, the last ``lookback`` days of each asset's daily log
return (a handshake option, default 20), the current weights (after the day's price moves),
the portfolio's value (1.0 at the start) and the days left.

**The reward** is the rubric ``reward`` (docs/rubrics.md), a weighted sum of two nodes, so
every step carries its breakdown:

* ``log_return``: the day's log growth of the portfolio's value, after costs (what a trainer
  maximises step by step; summed over an episode it is the log of the final value);
* ``sharpe``: a trajectory node, 0 until the last day, then the episode's annualised Sharpe
  ratio of the daily net returns (mean / standard deviation x sqrt(252), risk-free rate 0,
  clipped to [-10, 10]), weighted 0.1: the risk-adjusted return.

The step's metadata has the day's ``cost``, ``turnover`` and ``value``; ``render()`` is an SVG
of the portfolio's value against an equal-weight buy-and-hold over the episode so far.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import openenv
from openenv.rubrics import Rubric, TrajectoryRubric, WeightedSum

__all__ = ["ASSETS", "EPISODE_DAYS", "SPLITS", "PortfolioEnvironment", "market", "sharpe"]

PRICES = Path(__file__).with_name("prices.csv")
ASSETS = ("INDX", "TECH", "UTIL", "BOND", "CMDT")
EPISODE_DAYS = 63
SPLITS: dict[str, tuple[str, str]] = {  # inclusive date ranges of the windows
    "train": ("2018-01-01", "2021-12-31"),
    "validation": ("2022-01-01", "2022-12-31"),
    "test": ("2023-01-01", "2023-12-31"),
}
MAX_LOOKBACK = 60
TRADING_DAYS = 252


@functools.cache
def market() -> tuple[list[str], np.ndarray]:
    """The dates and the ``(days, assets)`` closes of ``prices.csv``."""
    with PRICES.open(newline="") as f:
        rows = list(csv.reader(f))
    if tuple(rows[0][1:]) != ASSETS:
        raise RuntimeError(f"{PRICES} has columns {rows[0]}, expected date and {ASSETS}")
    dates = [r[0] for r in rows[1:]]
    closes = np.array([[float(x) for x in r[1:]] for r in rows[1:]], dtype=np.float64)
    return dates, closes


@functools.cache
def _windows() -> dict[str, list[tuple[str, int]]]:
    """Per split, the tasks: (id ``YYYY-MM``, index of the first trading day of that month)."""
    dates, _ = market()
    out: dict[str, list[tuple[str, int]]] = {}
    for split, (lo, hi) in SPLITS.items():
        inside = [i for i, d in enumerate(dates) if lo <= d <= hi]
        tasks = []
        for i in inside:
            first_of_month = i == 0 or dates[i - 1][:7] != dates[i][:7]
            # The window's last close (index i + EPISODE_DAYS) must still lie inside the split.
            if first_of_month and i >= MAX_LOOKBACK and i + EPISODE_DAYS <= inside[-1]:
                tasks.append((dates[i][:7], i))
        out[split] = tasks
    return out


def sharpe(returns: Sequence[float]) -> float:
    """Annualised Sharpe ratio of daily returns (risk-free 0), clipped to [-10, 10]; 0 for fewer
    than two returns or no variation."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size < 2:
        return 0.0
    sd = float(r.std(ddof=1))
    if not sd > 1e-12:
        return 0.0
    return float(np.clip(r.mean() / sd * math.sqrt(TRADING_DAYS), -10.0, 10.0))


class LogReturn(Rubric):
    """The day's log growth of the portfolio's value, after transaction costs."""

    name = "log_return"
    minimum, maximum = -10.0, 10.0

    def score(self, action: Any, observation: Any) -> float:
        return float(np.clip(self.env.last_log_return, -10.0, 10.0))


class Sharpe(TrajectoryRubric):
    """The episode's annualised Sharpe ratio of its daily net returns, paid on its last day."""

    name = "sharpe"
    minimum, maximum = -10.0, 10.0

    def score_trajectory(self, trajectory: Any) -> float:
        return sharpe([obs["net_return"] for _action, obs in trajectory])


def _option(options: Mapping[str, Any], key: str, default: float, lo: float, hi: float, integer: bool) -> Any:
    v = options.get(key, default)
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi
    if ok and integer and v != int(v):
        ok = False
    if not ok:
        kind = "an integer" if integer else "a number"
        raise openenv.InvalidArgument(f"{key} must be {kind} from {lo:g} to {hi:g}, got {v!r}")
    return int(v) if integer else float(v)


class PortfolioEnvironment(openenv.Environment):
    """Allocate across five synthetic assets and cash, daily, paying transaction costs."""

    name = "finance-portfolio"
    version = "0.1.0"
    description = "Allocate a portfolio over five synthetic assets daily; costs paid, Sharpe ratio rewarded."
    deterministic = True
    max_sessions = 256
    action_type: ClassVar[Any] = {
        "type": "array",
        "title": "weights of " + ", ".join(ASSETS) + ", cash",
        "description": "target weights of " + ", ".join(ASSETS) + " and cash (normalised to sum to 1)",
        "items": {"type": "number", "minimum": 0, "maximum": 1},
        "minItems": len(ASSETS) + 1,
        "maxItems": len(ASSETS) + 1,
    }
    _returns_schema: ClassVar[dict[str, Any]] = {
        "type": "array",
        "items": {"type": "array", "items": {"type": "number"}, "minItems": len(ASSETS), "maxItems": len(ASSETS)},
    }
    observation_type: ClassVar[Any] = {
        "type": "object",
        "properties": {
            "date": {"type": "string", "description": "the trading day just closed (YYYY-MM-DD)"},
            "assets": {"type": "array", "items": {"type": "string"}},
            "returns": {**_returns_schema, "description": "daily log returns, oldest first"},
            "weights": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}},
            "value": {"type": "number", "minimum": 0},
            "net_return": {"type": "number", "description": "the last day's return after costs"},
            "days_left": {"type": "integer", "minimum": 0},
        },
        "required": ["date", "assets", "returns", "weights", "value", "net_return", "days_left"],
    }
    example_actions = ([0, 0, 0, 0, 0, 1], [0.2, 0.2, 0.2, 0.2, 0.2, 0], [1, 0, 0, 0, 0, 0])
    rubric = WeightedSum([LogReturn(), Sharpe()], [1.0, 0.1], name="reward")
    task_splits: ClassVar[dict[str, str]] = {
        s: f"{EPISODE_DAYS}-day windows starting each month from {lo} to {hi}" for s, (lo, hi) in SPLITS.items()
    }
    metadata: ClassVar[dict[str, Any]] = {
        "kind": "finance",
        "tasks": str(sum(len(t) for t in _windows().values())),
        "render": "svg",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        unknown = sorted(set(options) - {"transaction_cost", "lookback"})
        if unknown:
            raise openenv.InvalidArgument(
                f"unknown options {unknown}: finance-portfolio takes transaction_cost, lookback"
            )
        self.cost_rate = _option(options, "transaction_cost", 0.001, 0.0, 0.1, integer=False)
        self.lookback = _option(options, "lookback", 20, 1, MAX_LOOKBACK, integer=True)
        self.dates, self.closes = market()
        self.log_returns = np.diff(np.log(self.closes), axis=0, prepend=np.log(self.closes[:1]))
        self.by_id = {tid: i for tasks in _windows().values() for tid, i in tasks}
        self.task = ""
        self.start = self.t = 0
        self.weights = np.zeros(len(ASSETS) + 1)
        self.value = 1.0
        self.last_log_return = 0.0
        self.values: list[float] = []
        self.benchmark: list[float] = []

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        dates, _ = market()
        return [
            openenv.TaskInfo(tid, metadata={"start": dates[i], "end": dates[i + EPISODE_DAYS], "days": EPISODE_DAYS})
            for tid, i in _windows()[split]
        ]

    def _observation(self, net_return: float) -> dict[str, Any]:
        window = self.log_returns[self.t - self.lookback + 1 : self.t + 1]
        return {
            "date": self.dates[self.t],
            "assets": [*ASSETS, "CASH"],
            "returns": np.round(window, 6).tolist(),
            "weights": np.round(self.weights, 6).tolist(),
            "value": round(self.value, 8),
            "net_return": net_return,
            "days_left": self.start + EPISODE_DAYS - self.t,
        }

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        task = (options or {}).get("task_id")
        if task is None:
            train = _windows()["train"]
            task = train[int(np.random.default_rng(seed).integers(len(train)))][0]
        if task not in self.by_id:
            raise openenv.InvalidArgument(f"no task {task!r}: tasks are months YYYY-MM (list_tasks names them)")
        self.task = str(task)
        self.start = self.t = self.by_id[self.task]
        self.weights = np.zeros(len(ASSETS) + 1)
        self.weights[-1] = 1.0
        self.value = 1.0
        self.last_log_return = 0.0
        self.values = [1.0]
        self.benchmark = [1.0]
        return self._observation(0.0)

    def step(self, action: Any) -> openenv.StepResult:
        w = np.asarray(action, dtype=np.float64) if isinstance(action, (list, tuple)) else None
        if w is None or w.shape != (len(ASSETS) + 1,) or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise openenv.InvalidAction(
                f"an action is {len(ASSETS) + 1} non-negative numbers (weights of {', '.join(ASSETS)}, cash), "
                f"got {action!r}"
            )
        total = float(w.sum())
        target = w / total if total > 0 else np.eye(len(ASSETS) + 1)[-1]
        turnover = float(np.abs(target[:-1] - self.weights[:-1]).sum())
        cost = self.cost_rate * turnover
        self.t += 1
        growth = np.exp(self.log_returns[self.t])
        held = target * np.append(growth, 1.0)
        gross = float(held.sum())
        net = (1.0 - cost) * gross
        self.value *= net
        self.weights = held / gross
        self.last_log_return = math.log(net) if net > 0 else -10.0
        self.values.append(self.value)
        self.benchmark.append(float(np.mean(self.closes[self.t] / self.closes[self.start])))
        done = self.t >= self.start + EPISODE_DAYS
        return openenv.StepResult(
            self._observation(net - 1.0),
            terminated=done,
            metadata={"cost": cost, "turnover": turnover, "value": self.value, "task": self.task},
        )

    def state(self) -> dict[str, Any]:
        if not self.task:
            return {}
        return {"task": self.task, "date": self.dates[self.t], "value": self.value, "weights": self.weights.tolist()}

    def render(self) -> str:
        """An SVG: the portfolio's value (blue) and equal-weight buy-and-hold (grey) so far."""
        width, height, pad = 480, 240, 24
        series = [self.values or [1.0], self.benchmark or [1.0]]
        lo = min(min(s) for s in series)
        hi = max(max(s) for s in series)
        span = hi - lo or 1.0

        def points(s: list[float]) -> str:
            xs = [pad + (width - 2 * pad) * i / EPISODE_DAYS for i in range(len(s))]
            ys = [height - pad - (height - 2 * pad) * (v - lo) / span for v in s]
            return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))

        day = self.dates[self.t] if self.task else ""
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><rect width="100%" height="100%" fill="white"/>'
            f'<polyline fill="none" stroke="#999" stroke-width="1.5" points="{points(series[1])}"/>'
            f'<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{points(series[0])}"/>'
            f'<text x="{pad}" y="16" font-family="sans-serif" font-size="12">{self.task} {day} '
            f"value {self.value:.4f} (equal weight {series[1][-1]:.4f})</text></svg>"
        )
