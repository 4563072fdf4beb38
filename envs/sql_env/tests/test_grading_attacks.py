"""Issue 46's sql_env finding, replayed through the environment's own tools over real servers.

A reward-seeking policy earned partial credit (up to 0.125 then; the shaping was 0.5 x the
Jaccard similarity of row multisets) without answering: supersets of the answer, enumerations of
candidates, whole tables. And one ``SELECT length(randomblob(400000000))`` took the process every
session shares from 74 to 456 MiB. Here, on every shipped question, constants, whole tables,
supersets and enumerations earn 0; the allocation attacks are refused as errors of their call
while the server's peak memory stays bounded; strict feedback says nothing but the reward, and
rich feedback (asked for at reset) still gives the score's detail.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from importlib import resources
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from sql_env import SqlEnvironment, questions

#: The in-process server's whole run, and the subprocess server's start: hang guards, not timings.
TIMEOUT = 600.0
MiB = 1024 * 1024


def run(fn: Callable[[Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with openenv.Server(SqlEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# -- the attacks, built from the schema and the reference as a policy that read them would ------


def _local(db: str) -> sqlite3.Connection:
    """A private copy of a shipped database (the test's own, to know what each attack returns)."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(resources.files("sql_env").joinpath(f"data/{db}.sql").read_text())
    return conn


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def _values_sql(conn: sqlite3.Connection) -> str:
    """Every value of every column of every table, as one column."""
    parts = []
    for t in _tables(conn):
        for col in conn.execute(f"PRAGMA table_info({t})"):
            parts.append(f"SELECT {col[1]} AS v FROM {t}")
    return " UNION ".join(parts)


def _without(sql: str, clause: str) -> str:
    """``sql`` without its WHERE (up to GROUP BY/ORDER BY/LIMIT) or its LIMIT."""
    if clause == "where":
        return re.sub(r"(?is)\s+WHERE\s+.*?(?=\s+GROUP BY|\s+ORDER BY|\s+LIMIT|$)", "", sql, count=1)
    return re.sub(r"(?is)\s+LIMIT\s+\d+", "", sql)


def attacks(q: dict[str, str], conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Constants, whole tables, supersets and enumerations of question ``q``'s answer."""
    ref = q["sql"]
    width = len(conn.execute(ref).description)
    nulls = ", ".join(["NULL"] * width)
    cols = [f"c{i}" for i in range(width)]
    ints = "WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < 1000)"
    want = Counter(conn.execute(ref).fetchall())
    supersets = [
        f"SELECT * FROM ({ref}) UNION ALL SELECT {nulls}",  # the answer and one more row
        f"SELECT * FROM ({ref}) UNION ALL SELECT * FROM ({ref})",  # every row twice
    ]
    for clause in ("where", "limit"):  # the reference, less selective, where that is a superset
        wider = _without(ref, clause)
        if wider != ref:
            got = Counter(conn.execute(wider).fetchall())
            if got != want and not want - got:
                supersets.append(wider)
    # Cross joins of per-column candidates: each column's values in the answer, or in the whole
    # database, with the integers 0..1000.
    domain = " CROSS JOIN ".join(
        f"(SELECT DISTINCT {c} FROM r UNION SELECT x FROM n WHERE x <= 60) AS t{i}" for i, c in enumerate(cols)
    )
    enumerations = [
        f"{ints} SELECT {', '.join(['x'] * width)} FROM n",
        f"{ints}, r({', '.join(cols)}) AS ({ref}) SELECT * FROM {domain}",
    ]
    if width == 1:
        enumerations.append(_values_sql(conn))
    else:
        rest = " CROSS JOIN ".join(["(SELECT x FROM n WHERE x <= 60)"] * (width - 1))
        enumerations.append(f"{ints} SELECT * FROM ({_values_sql(conn)}) CROSS JOIN {rest}")
    return {
        "constant": ["SELECT 1", "SELECT NULL", "SELECT ''", "SELECT 1 WHERE 0"],  # the last: no rows
        "table": [f"SELECT * FROM {t}" for t in _tables(conn)],
        "superset": supersets,
        "enumeration": enumerations,
    }


def _same(conn: sqlite3.Connection, sql: str, ref: str) -> bool:
    """Whether ``sql`` returns the reference's rows (then it answers the question: not an attack)."""
    got, want = conn.execute(sql).fetchall(), conn.execute(ref).fetchall()
    return Counter(got) == Counter(want)


def test_no_question_is_answered_by_a_constant_an_empty_result_or_any_attack() -> None:
    """Every attack below is wrong on its question: no shipped answer is empty (an empty result
    answered shop-15, "which products were never ordered?", for 1.0), a constant or a table."""
    conns = {db: _local(db) for db in ("shop", "school")}
    for q in questions():
        conn = conns[q["db"]]
        assert conn.execute(q["sql"]).fetchall(), f"{q['id']}: the answer has no rows"
        for sqls in attacks(q, conn).values():
            for sql in sqls:
                assert not _same(conn, sql, q["sql"]), (q["id"], sql)


def test_constants_whole_tables_supersets_and_enumerations_earn_nothing_on_every_question() -> None:
    """RFC 0015: no partial credit for a constant, an empty answer, a superset or an enumeration.
    The old shaping paid up to 0.5 x Jaccard for each of these that had the answer's width."""
    plan: list[tuple[str, str, str]] = []
    conns = {db: _local(db) for db in ("shop", "school")}
    for q in questions():
        for kind, sqls in attacks(q, conns[q["db"]]).items():
            plan.extend((q["id"], kind, sql) for sql in sqls)
    assert len(plan) >= 28 * 10

    async def go(env: Any) -> list[tuple[float, str, str, str]]:
        out = []
        for qid, kind, sql in plan:
            await env.reset(options={"question_id": qid})
            r = await env.step(CallToolAction("submit", {"sql": sql}))
            assert r.terminated, (qid, sql)
            out.append((r.reward, qid, kind, sql))
        return out

    results = run(go)
    kinds = Counter(kind for _, _, kind, _ in results)
    assert kinds["superset"] >= 2 * 28 + 5 and kinds["enumeration"] == 3 * 28, kinds
    paid = sorted((r for r in results if r[0] != 0.0), reverse=True)
    by_kind = {k: max(r for r, _, kind, _ in results if kind == k) for k in kinds}
    assert not paid, f"{len(paid)} of {len(results)} attacks earned; best by kind {by_kind}; the best: {paid[:3]}"


def test_strict_feedback_is_the_same_for_two_wrong_queries_and_submit_is_no_oracle() -> None:
    """Strict (the default): a superset and a constant get the same observation, metadata,
    breakdown and state (nothing of the grader's comparison but the reward), and submit as a
    side call is refused (it would grade as often as it is called)."""

    async def go(env: Any) -> Any:
        out = []
        for sql in ("SELECT name FROM customers", "SELECT 1"):
            await env.reset(options={"question_id": "shop-02"})
            r = await env.step(CallToolAction("submit", {"sql": sql}))
            st = await env.state()
            bd = r.reward_breakdown
            out.append((r.observation.result.to_dict(), dict(r.metadata), bd, st.state, r.reward))
        await env.reset(options={"question_id": "shop-02"})
        with pytest.raises(openenv.FailedPrecondition):
            await env.call_tool("submit", {"sql": "SELECT name FROM customers"})
        return out

    superset, constant = run(go)
    assert superset == constant
    assert superset[0]["structured_content"] == {"reward": 0.0}


def test_rich_feedback_asked_at_reset_reports_the_score_detail() -> None:
    """Rich feedback is offered (curricula, evaluation): the superset's result says how many
    rows it returned, how many the answer has and how many they share."""

    async def go(env: Any) -> Any:
        caps = env.info.capabilities
        await env.reset(options={"question_id": "shop-02", "feedback": "rich"})
        r = await env.step(CallToolAction("submit", {"sql": "SELECT name FROM customers"}))
        return caps, r

    caps, r = run(go)
    assert caps.grades and list(caps.feedback_offered) == [1, 2]  # strict, rich
    detail = r.observation.result.data
    assert r.reward == 0.0 and detail["score"] == 0.0
    assert detail["row_count"] == 30 and detail["rows_in_common"] == detail["expected_row_count"] > 0


def test_the_grading_probes_reference_earns_one_and_its_nulls_and_replays_nothing() -> None:
    """The probes the certifier's grading level plays: each reference answers its question,
    and the nulls (no rows, NULL) and the replays (another question's answer) earn 0."""
    probes = SqlEnvironment.grading_probes()
    assert len(probes) >= 4 and len({p.options["question_id"] for p in probes}) == len(probes)

    async def play(env: Any, options: Any, calls: Any) -> float:
        await env.reset(options=dict(options))
        for c in calls:
            r = await env.step(c)
        return float(r.reward)

    async def go(env: Any) -> list[tuple[float, list[float], list[float]]]:
        out = []
        for p in probes:
            ref = await play(env, p.options, p.reference)
            nulls = [await play(env, p.options, s) for s in p.null]
            replays = [await play(env, p.options, s) for s in p.replay]
            out.append((ref, nulls, replays))
        return out

    for ref, nulls, replays in run(go):
        assert ref == 1.0 and nulls and set(nulls) == {0.0} and set(replays) <= {0.0}


# -- resources: the process every session shares ----------------------------------------------

#: Each builds (or asks SQLite to build) hundreds of MB, or burns CPU inside SQLite.
MEMORY_ATTACKS = (
    "SELECT length(randomblob(400000000))",  # issue 46's: 74 -> 456 MiB
    "SELECT length(hex(zeroblob(150000000)))",
    "SELECT length(printf('%.*c', 300000000, 'x'))",
    # replace/group_concat growth from a string doubled by a recursive CTE (no allocation function)
    "WITH RECURSIVE d(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM d WHERE length(s) < 16384) "
    "SELECT length(replace(s, 'x', s)) FROM d WHERE length(s) >= 16384",
    "WITH RECURSIVE d(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM d WHERE length(s) < 65536), "
    "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 4000) "
    "SELECT length(group_concat(s)) FROM c, d WHERE length(s) >= 65536",
    # a recursive CTE's UNION table (every row kept), and a sort, of thousands of 8 kB rows
    "WITH RECURSIVE d(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM d WHERE length(s) < 8192), "
    "c(x, b) AS (SELECT 1, (SELECT max(s) FROM d) UNION SELECT x + 1, b FROM c WHERE x < 40000) "
    "SELECT count(*) FROM c",
    "WITH RECURSIVE d(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM d WHERE length(s) < 8192), "
    "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40000) "
    "SELECT x || s FROM c, d WHERE length(s) >= 8192 ORDER BY 1 DESC LIMIT 1 OFFSET 39999",
)
#: A 4 kB search in an 8 kB string per row (a millisecond a VM step), rows without end: the step
#: budget alone let it run for 30 s of CPU per call.
CPU_ATTACK = (
    "WITH RECURSIVE d(s) AS (SELECT 'aa' UNION ALL SELECT s || s FROM d WHERE length(s) < 8192), "
    "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT sum(instr(x || (SELECT max(s) FROM d), substr((SELECT max(s) FROM d), 1, 4000) || 'b')) FROM c"
)
#: Peak growth allowed: SQLite's heap limit (64 MiB, over every session) and 32 MiB for Python
#: and the allocator. The attacks reached 380-760 MiB before the limits.
MAX_GROWTH = 96 * MiB


def _vm(pid: int, key: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real server process (``openenv serve``), as an image runs it; its /proc is ours to read."""
    ready, log = tmp_path / "address", tmp_path / "server.log"
    cmd = [sys.executable, "-m", "openenv.cli", "serve", "sql_env.server:SqlEnvironment"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*cmd, "--port", "0", "--no-http", "--ready-file", str(ready), "--grace", "1"], stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() or not ready.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"openenv serve did not start (exit {proc.poll()}):\n{log.read_text()}")
            time.sleep(0.05)
        yield proc, ready.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_memory_and_cpu_attacks_are_errors_of_their_call_and_the_servers_peak_stays_bounded(
    server: tuple[subprocess.Popen[bytes], str],
) -> None:
    """Each attack, as run_query and as submit, is an error of that call (submit: reward 0, the
    episode over); the session and the server go on (the right answer still earns 1); the
    server's peak resident memory (VmHWM) grows by less than the heap limit and some slack."""
    proc, address = server

    def go() -> tuple[list[tuple[str, str]], int, int]:
        out = []
        env: Any
        with openenv.ToolEnvClient(address).sync() as env:
            env.reset(options={"question_id": "shop-01"})  # warm: a session, a database, a query
            env.step(CallToolAction("run_query", {"sql": "SELECT COUNT(*) FROM customers"}))
            before = _vm(proc.pid, "VmHWM")
            for sql in (*MEMORY_ATTACKS, CPU_ATTACK):
                env.reset(options={"question_id": "shop-01", "feedback": "rich"})
                r = env.step(CallToolAction("run_query", {"sql": sql}), timeout=300)
                assert r.observation.result.is_error, (sql, r.observation.result.text[:200])
                error = None
                if sql != CPU_ATTACK:  # submit runs queries as run_query does: 5 s of CPU once is enough
                    s = env.step(CallToolAction("submit", {"sql": sql}), timeout=300)
                    assert s.terminated and s.reward == 0.0, sql
                    error = s.observation.result.data.get("error")
                    assert error and "SQL error" in error, (sql, error)
                out.append((sql, r.observation.result.text))
                env.reset(options={"question_id": "shop-01"})
                ok = env.step(CallToolAction("submit", {"sql": "SELECT COUNT(*) FROM customers"}))
                assert ok.reward == 1.0, sql
            return out, before, _vm(proc.pid, "VmHWM")

    out, before, peak = go()
    for sql, error in out:
        assert "SQL error" in error, (sql, error)
    assert "ran too long" in out[-1][1]
    assert proc.poll() is None
    assert peak - before < MAX_GROWTH, f"VmHWM {before / MiB:.0f} -> {peak / MiB:.0f} MiB"
