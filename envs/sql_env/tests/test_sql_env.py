"""The SQL environment over a real gRPC server on loopback: every reference query answers
its own question (reward 1.0), a wrong or partly right query earns 0 (partial credit is an
opt-in), and the database is read-only and bounded. The grading attacks and the resource
limits have their own file, test_grading_attacks.py."""

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


def test_a_wrong_or_partly_right_query_earns_nothing_and_rich_feedback_says_why() -> None:
    """All or nothing by default (RFC 0015): a wrong constant, four of five rows and a broken
    query earn 0 and end the episode; asked for at reset, rich feedback shows the score's detail
    and SQLite's error."""

    async def go(env: Any) -> Any:
        await env.reset(options={"question_id": "shop-02", "feedback": "rich"})
        wrong = await env.step(CallToolAction("submit", {"sql": "SELECT 42"}))
        await env.reset(options={"question_id": "shop-04", "feedback": "rich"})
        sql = "SELECT category, COUNT(*) FROM products WHERE category != 'books' GROUP BY category"
        partial = await env.step(CallToolAction("submit", {"sql": sql}))
        await env.reset(options={"question_id": "shop-02", "feedback": "rich"})
        broken = await env.step(CallToolAction("submit", {"sql": "SELEC name"}))
        return wrong, partial, broken

    wrong, partial, broken = run(go)
    assert wrong.reward == 0.0 and wrong.terminated
    assert partial.reward == 0.0 and partial.terminated
    assert partial.observation.result.data == {
        "score": 0.0,
        "row_count": 4,
        "expected_row_count": 5,
        "rows_in_common": 4,
        "same_width": True,
        "ordered": False,
    }
    assert broken.reward == 0.0 and "SQL error" in broken.observation.result.data["error"]


class PartialCredit(SqlEnvironment):
    partial_credit = True


def test_partial_credit_is_an_opt_in_that_pays_only_for_a_strict_part_of_the_answer() -> None:
    """With ``partial_credit`` set, four of the five rows earn 0.5 x 4/5; the same rows plus
    one extra (a superset) still earn nothing."""

    async def go() -> Any:
        async with openenv.Server(PartialCredit, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                out = []
                for sql in (
                    "SELECT category, COUNT(*) FROM products WHERE category != 'books' GROUP BY category",
                    "SELECT category, COUNT(*) FROM products GROUP BY category UNION ALL SELECT 'x', 1",
                ):
                    await env.reset(options={"question_id": "shop-04"})
                    out.append((await env.step(CallToolAction("submit", {"sql": sql}))).reward)
                return out

    part, superset = asyncio.run(asyncio.wait_for(go(), 60))
    assert part == pytest.approx(0.5 * 4 / 5) and superset == 0.0


def test_score_is_all_or_nothing_and_its_opt_in_pays_no_constant_superset_or_enumeration() -> None:
    """The pure function: order counts only when the reference orders; with ``partial`` the
    right rows in the wrong order earn 0.5, a strict part of at least half of an answer of three
    rows or more earns 0.5 x its share, and one row, an extra row or no rows earn nothing."""
    assert score([(2,), (1,)], [(1,), (2,)], ordered=False) == 1.0
    assert score([(2,), (1,)], [(1,), (2,)], ordered=True) == 0.0
    assert score([(2,), (1,)], [(1,), (2,)], ordered=True, partial=True) == 0.5
    want = [(1,), (2,), (3,), (4,)]
    assert score([(1,), (2,), (3,)], want, ordered=False) == 0.0
    assert score([(1,), (2,), (3,)], want, ordered=False, partial=True) == pytest.approx(0.5 * 3 / 4)
    assert score([(1,), (2,)], want, ordered=False, partial=True) == pytest.approx(0.25)
    for got in ([(1,)], [], [*want, (5,)], [(x,) for x in range(100)], [(1,), (1,), (2,)], [(1, 1), (2, 2)]):
        assert score(got, want, ordered=False, partial=True) == 0.0, got
    assert score([(1,)], [(1,), (2,)], ordered=False, partial=True) == 0.0  # too short an answer for a part


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
