"""The SQL environment over a real gRPC server on loopback: every reference query answers
its own question (reward 1.0), wrong and partly right queries get graded rewards, and the
database is read-only and bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from sql_env import SqlEnvironment, questions, score


def run(fn: Callable[[Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with openenv.Server(SqlEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), 60))


def test_every_reference_query_scores_one() -> None:
    async def go(env: Any) -> Any:
        out = {}
        for q in questions():
            await env.reset(options={"question_id": q["id"]})
            out[q["id"]] = (await env.step(CallToolAction("submit", {"sql": q["sql"]}))).reward
        return out

    rewards = run(go)
    assert len(rewards) >= 24 and set(rewards.values()) == {1.0}


def test_wrong_and_partial_answers_get_graded_rewards() -> None:
    async def go(env: Any) -> Any:
        await env.reset(options={"question_id": "shop-02"})
        wrong = await env.step(CallToolAction("submit", {"sql": "SELECT 42"}))
        await env.reset(options={"question_id": "shop-04"})
        sql = "SELECT category, COUNT(*) FROM products WHERE category != 'books' GROUP BY category"
        partial = await env.step(CallToolAction("submit", {"sql": sql}))
        await env.reset(options={"question_id": "shop-02"})
        broken = await env.step(CallToolAction("submit", {"sql": "SELEC name"}))
        return wrong, partial, broken

    wrong, partial, broken = run(go)
    assert wrong.reward == 0.0 and wrong.terminated
    assert partial.reward == pytest.approx(0.5 * 4 / 5)
    assert broken.reward == 0.0 and "SQL error" in broken.observation.result.data["error"]


def test_score_respects_order_only_when_the_reference_orders() -> None:
    assert score([(2,), (1,)], [(1,), (2,)], ordered=False) == 1.0
    assert score([(2,), (1,)], [(1,), (2,)], ordered=True) == 0.5


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM customers",
        "DROP TABLE orders",
        "INSERT INTO customers VALUES (99, 'x', 'y', '2020-01-01')",
        "ATTACH DATABASE '/tmp/x.db' AS x",
        "PRAGMA writable_schema = 1",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
    ],
)
def test_queries_are_read_only_and_bounded(sql: str) -> None:
    async def go(env: Any) -> Any:
        await env.reset(options={"question_id": "shop-01"})
        bad = await env.step(CallToolAction("run_query", {"sql": sql}))
        good = await env.step(CallToolAction("submit", {"sql": "SELECT COUNT(*) FROM customers"}))
        return bad, good

    bad, good = run(go)
    assert bad.observation.result.is_error and "SQL error" in bad.observation.result.text
    assert good.reward == 1.0


def test_seeds_pick_the_same_question() -> None:
    async def go(env: Any) -> Any:
        return [(await env.reset(seed=s)).metadata["question_id"] for s in (3, 3)]

    a, b = run(go)
    assert a == b
