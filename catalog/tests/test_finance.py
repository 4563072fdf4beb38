"""The finance environment: its shipped data is its script's output, tasks split by date range,
transaction costs paid, the rubric's breakdown (log return each day, Sharpe ratio at the end)
over a real gRPC server, bad actions and options refused."""

from __future__ import annotations

import asyncio
import importlib.util
import math
from typing import Any

import numpy as np
import pytest

import openenv
from openenv_catalog import finance
from openenv_catalog.finance import ASSETS, EPISODE_DAYS, SPLITS, PortfolioEnvironment

TIMEOUT = 60.0  # a hang guard only
EQUAL = [1 / len(ASSETS)] * len(ASSETS) + [0.0]
CASH = [0.0] * len(ASSETS) + [1.0]


def test_the_shipped_prices_are_exactly_what_the_seeded_script_writes() -> None:
    spec = importlib.util.spec_from_file_location("make_prices", finance.PRICES.with_name("make_prices.py"))
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert finance.PRICES.read_text() == script.generate()
    assert finance.PRICES.stat().st_size < 100_000  # small enough to ship in the package


def test_tasks_are_split_by_date_range_and_never_cross_their_split() -> None:
    dates, _ = finance.market()
    seen: set[str] = set()
    for split, (lo, hi) in SPLITS.items():
        tasks = PortfolioEnvironment.list_tasks(split)
        assert tasks, split
        for t in tasks:
            assert lo <= t.metadata["start"] and t.metadata["end"] <= hi, (split, t)
            assert t.id == t.metadata["start"][:7] and t.id not in seen
            assert dates.index(t.metadata["end"]) - dates.index(t.metadata["start"]) == EPISODE_DAYS
            seen.add(t.id)
    ends = {s: max(t.metadata["end"] for t in PortfolioEnvironment.list_tasks(s)) for s in SPLITS}
    starts = {s: min(t.metadata["start"] for t in PortfolioEnvironment.list_tasks(s)) for s in SPLITS}
    assert ends["train"] < starts["validation"] and ends["validation"] < starts["test"]


def _play(env: PortfolioEnvironment, task: str, policy: list[list[float]]) -> list[openenv.StepResult]:
    env.reset(options={"task_id": task})
    out = []
    for t in range(EPISODE_DAYS):
        out.append(env.step(policy[t % len(policy)]))
    assert out[-1].terminated
    return out


def test_transaction_costs_are_paid_on_what_is_traded() -> None:
    free, costly = PortfolioEnvironment(transaction_cost=0.0), PortfolioEnvironment(transaction_cost=0.01)
    churn = [EQUAL, CASH]  # all in, all out, every day
    a, b = _play(free, "2022-03", churn), _play(costly, "2022-03", churn)
    assert a[0].metadata["turnover"] == pytest.approx(1.0) and b[0].metadata["cost"] == pytest.approx(0.01)
    assert b[-1].observation["value"] < a[-1].observation["value"] * 0.99**EPISODE_DAYS * 1.0001
    # Holding cash costs nothing and earns nothing.
    hold = _play(costly, "2022-03", [CASH])
    assert hold[-1].observation["value"] == 1.0 and all(r.metadata["cost"] == 0 for r in hold)
    # Buy and hold pays once: the portfolio then drifts with prices, and no cost is paid to stay.
    held = _play(costly, "2023-02", [EQUAL])
    assert held[0].metadata["cost"] == pytest.approx(0.01)
    assert sum(r.metadata["turnover"] for r in held[1:]) < 0.5


def test_the_rubric_pays_log_returns_daily_and_the_sharpe_ratio_at_the_end_over_the_wire() -> None:
    async def go(env: Any) -> Any:
        first = await env.reset(seed=7)
        steps = [await env.step(EQUAL)]
        while not steps[-1].terminated:
            steps.append(await env.step(EQUAL))
        return env.info, first, steps

    async def main() -> Any:
        async with openenv.Server(PortfolioEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.EnvClient(srv.address) as env:
                return await go(env)

    info, first, steps = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert [c.name for c in info.rubric.children] == ["log_return", "sharpe"]
    assert len(steps) == EPISODE_DAYS and first.observation["days_left"] == EPISODE_DAYS
    values = [1.0] + [s.observation["value"] for s in steps]
    daily = [s.observation["net_return"] for s in steps]
    for s, before, after in zip(steps[:-1], values, values[1:], strict=False):
        assert s.reward == pytest.approx(math.log(after / before), abs=1e-6)
        assert s.reward_breakdown.find("sharpe").score == 0.0
    last = steps[-1]
    expected_sharpe = float(np.mean(daily) / np.std(daily, ddof=1) * math.sqrt(252))
    assert last.reward_breakdown.find("sharpe").score == pytest.approx(expected_sharpe, rel=1e-6)
    assert last.reward == pytest.approx(math.log(values[-1] / values[-2]) + 0.1 * expected_sharpe, abs=1e-6)
    assert sum(s.reward_breakdown.find("log_return").score for s in steps) == pytest.approx(
        math.log(values[-1]), abs=1e-5
    )


def test_bad_actions_tasks_and_options_are_refused() -> None:
    env = PortfolioEnvironment()
    env.reset(options={"task_id": "2023-01"})
    for bad in ([0.5] * 5, [-0.1, 0, 0, 0, 0, 1.1], [float("nan")] * 6, "all in", None):
        with pytest.raises(openenv.InvalidAction):
            env.step(bad)
    assert env.step([0, 0, 0, 0, 0, 0]).observation["weights"][-1] == 1.0  # nothing: all cash
    with pytest.raises(openenv.InvalidArgument):
        env.reset(options={"task_id": "1999-01"})
    for options in ({"transaction_cost": -1}, {"transaction_cost": 0.5}, {"lookback": 0}, {"lookback": 2.5}, {"x": 1}):
        with pytest.raises(openenv.InvalidArgument):
            PortfolioEnvironment(**options)
    assert len(PortfolioEnvironment(lookback=5).reset(seed=1)["returns"]) == 5


def test_a_policy_cannot_see_tomorrow_or_lever_up() -> None:
    """What a reward-seeking policy would try: read the next day's return from the observation,
    or put more than the portfolio on the winners (weights summing past 1, one huge weight)."""
    dates, closes = finance.market()
    returns = np.diff(np.log(closes), axis=0, prepend=np.log(closes[:1]))  # returns[t]: day t's
    env = PortfolioEnvironment(transaction_cost=0.0)
    obs = env.reset(options={"task_id": "2023-02"})
    today = dates.index(obs["date"])
    # The window ends today: the return a step earns (tomorrow's) is in no observation yet.
    assert obs["returns"][-1] == pytest.approx(np.round(returns[today], 6).tolist())
    seen = {tuple(r) for r in obs["returns"]}
    assert tuple(np.round(returns[today + 1], 6).tolist()) not in seen
    # The best asset of tomorrow, all in: the step earns exactly its return, not more.
    best = int(np.argmax(returns[today + 1]))
    all_in = [0.0] * (len(ASSETS) + 1)
    all_in[best] = 1.0
    step = env.step(all_in)
    assert step.observation["value"] == pytest.approx(math.exp(returns[today + 1][best]))
    # Weights are normalised: 100x the same bet is the same bet (no leverage), and a negative
    # weight (a short) is refused, as is a non-finite one.
    levered = PortfolioEnvironment(transaction_cost=0.0)
    levered.reset(options={"task_id": "2023-02"})
    big = [w * 100 for w in all_in]
    assert levered.step(big).observation["value"] == pytest.approx(step.observation["value"])
    for bad in ([-1.0] + [0.0] * len(ASSETS), [math.inf] + [0.0] * len(ASSETS), [math.nan] * (len(ASSETS) + 1)):
        with pytest.raises(openenv.InvalidAction):
            levered.step(bad)
