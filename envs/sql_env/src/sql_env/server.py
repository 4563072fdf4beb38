"""Text-to-SQL over SQLite: answer a question about a shipped database with one SELECT.

Tools: ``schema()`` (the CREATE statements), ``run_query(sql)`` (columns and at most 50
rows), ``submit(sql)`` (grades the query and ends the episode). The reward of a submission is
all or nothing: 1.0 when its result equals the reference query's (as multisets of rows; in
order when the reference orders), else 0 (RFC 0015: no credit for a constant, a superset of
the answer or an enumeration of candidates). :attr:`SqlEnvironment.partial_credit` opts into
credit for a strict part of the answer (:func:`score`).

Each session has its own in-memory copy of the database. Queries are read-only (an authorizer
allows reading only) and bounded inside the process every session shares: SQLite's limits
(:data:`LIMITS`: a value or row of at most 10 kB, statement length, columns, expression
depth...), a budget of VM steps and of CPU time per query, no ``randomblob``, ``zeroblob``,
``printf``/``format`` (:data:`REFUSED_FUNCTIONS`), temporary tables and sorts in memory under a
process-wide heap limit (:data:`HEAP_LIMIT`), and results read row by row (never a whole result
set in Python). A query that exceeds a bound is an error of that call; the session and the
server go on.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any, ClassVar

import openenv

MAX_ROWS = 50
"""Rows ``run_query`` shows (it counts the rest)."""
MAX_SQL_CHARS = 5000
"""The longest query accepted, in characters."""
MAX_SHOWN_CHARS = 500
"""``run_query`` shows at most this many characters of a value (the reply stays far below a message's limit)."""
DETAIL_ROWS = 200
"""Rows of a submission kept beyond the answer's count, for rich feedback's ``rows_in_common``
(null past them): a submission's result is never held whole either."""
VM_STEP_BUDGET = 5_000_000
"""SQLite VM steps one query may take."""
CPU_BUDGET_S = 5.0
"""CPU seconds one query may take (its thread's time, not the wall clock: a loaded machine does
not fail queries). The step budget alone does not bound time: one step may search or copy a
whole value (5M steps of 100 kB printf took 220 s of CPU). Every shipped query takes milliseconds."""
HEAP_LIMIT = 64 * 1024 * 1024
"""SQLite's hard heap limit, in bytes (``PRAGMA hard_heap_limit``). It is process-wide, for every
connection of every session (each in-memory database takes ~40 kB, a heavy join a few MB): an
allocation past it fails the query that makes it with "out of memory". Only ever lowered (a
stricter limit set by someone else in the process is kept)."""
LIMITS = {
    # A string, BLOB or row: what replace/group_concat/|| may build, and how much one VM step may
    # search (instr, replace: quadratic in it; 0.3 ms a step at 10 kB).
    sqlite3.SQLITE_LIMIT_LENGTH: 10_000,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 4 * MAX_SQL_CHARS,  # bytes of UTF-8
    sqlite3.SQLITE_LIMIT_COLUMN: 64,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 100,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 50,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 32,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1000,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 10,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}
"""SQLite's run-time limits on every session's connection (``Connection.setlimit``), set after
the database is loaded. SQLITE_LIMIT_LENGTH bounds every value a function builds: a query that
asks for more gets "string or blob too big"."""
REFUSED_FUNCTIONS = frozenset({"randomblob", "zeroblob", "printf", "format", "load_extension"})
"""Functions the authorizer refuses; no question needs them. ``randomblob(4e8)`` took the shared
process from 74 to 456 MiB; ``printf('%.*c', 2147483647, 'x')`` (``format`` is the same function)
spends 28 s of CPU inside one VM step, out of any budget's reach, even when the limit on lengths
stops its output."""
_ALLOWED = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}
#: Partial credit (the opt-in): only for a strict part of an answer of at least this many rows...
PARTIAL_MIN_ROWS = 3
#: ...holding at least this share of its rows (so one guessed row never earns).
PARTIAL_MIN_SHARE = 0.5


def questions() -> list[dict[str, str]]:
    data: list[dict[str, str]] = json.loads(resources.files("sql_env").joinpath("data/questions.json").read_text())
    return data


def _script(db: str) -> str:
    return resources.files("sql_env").joinpath(f"data/{db}.sql").read_text()


def _authorizer(action: int, arg1: Any, arg2: Any, *_: Any) -> int:
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in REFUSED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def _connect(db: str) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    # Temporary b-trees and sorter spills in memory, where the heap limit bounds them (on disk,
    # a recursive CTE's UNION table of 100 kB rows grows a temporary file without bound).
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT}")  # lowers the limit only, never raises it
    (limit,) = conn.execute("PRAGMA hard_heap_limit").fetchone()
    if not 0 < limit <= HEAP_LIMIT:
        raise RuntimeError(f"SQLite {sqlite3.sqlite_version} did not take a hard heap limit (needs 3.31+)")
    conn.executescript(_script(db))
    for category, value in LIMITS.items():
        conn.setlimit(category, value)
    conn.set_authorizer(_authorizer)
    return conn


class _Budget:
    """A query's progress handler: stops it past :data:`VM_STEP_BUDGET` steps or :data:`CPU_BUDGET_S`."""

    EVERY = 1000

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.thread_time() + CPU_BUDGET_S
        self.exceeded = False

    def __call__(self) -> int:
        self.steps += self.EVERY
        self.exceeded = self.steps > VM_STEP_BUDGET or time.thread_time() > self.deadline
        return 1 if self.exceeded else 0


def _execute(conn: sqlite3.Connection, sql: str, keep: int) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """Run ``sql``: its columns, its first ``keep`` rows and its row count (the rest are counted
    and dropped as they come: a result is never held whole). ValueError on any SQL error or
    exceeded bound, with SQLite's reason."""
    if len(sql) > MAX_SQL_CHARS:
        raise ValueError(f"queries are limited to {MAX_SQL_CHARS} characters")
    budget = _Budget()
    conn.set_progress_handler(budget, _Budget.EVERY)
    try:
        cur = conn.execute(sql)
        cols = [d[0] for d in cur.description or []]
        rows: list[tuple[Any, ...]] = []
        count = 0
        for row in _rows(cur):
            if count < keep:
                rows.append(tuple(row))
            count += 1
        return cols, rows, count
    except (sqlite3.Error, MemoryError) as e:
        # MemoryError is how Python's sqlite3 reports SQLite's "out of memory" (the heap limit):
        # the query is over, and the connection usable.
        if budget.exceeded:
            msg = "the query ran too long"
        elif isinstance(e, MemoryError):
            msg = "out of memory (SQLite's heap, shared by every session of this server, is full)"
        else:
            msg = str(e)
        raise ValueError(f"SQL error: {msg}") from None
    finally:
        conn.set_progress_handler(None, 0)


def _rows(cur: sqlite3.Cursor) -> Iterator[Any]:
    while batch := cur.fetchmany(256):
        yield from batch


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def score(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], ordered: bool, partial: bool = False) -> float:
    """The reward of a result ``got`` for the reference's ``want``.

    1.0 when they are the same rows (in the same order when ``ordered``), else 0. With
    ``partial`` (the opt-in), a result that is right but for what follows earns part of it:
    0.5 for the right rows in the wrong order; ``0.5 x share`` for a strict part of the answer
    (every row of ``got`` is a row of ``want``, counted with repeats, none extra) when the
    answer has at least :data:`PARTIAL_MIN_ROWS` rows and ``got`` at least
    :data:`PARTIAL_MIN_SHARE` of them. So nothing is paid for a constant (one row is less than
    half of three), an empty result, a superset or an enumeration (an extra row pays 0).
    """
    g, w = [_norm(r) for r in got], [_norm(r) for r in want]
    cg, cw = Counter(g), Counter(w)
    if (g == w) if ordered else (cg == cw):
        return 1.0
    if not partial:
        return 0.0
    if cg == cw:  # every row, in the wrong order
        return 0.5
    share = len(g) / len(w) if w else 0.0
    if len(w) >= PARTIAL_MIN_ROWS and share >= PARTIAL_MIN_SHARE and not cg - cw:
        return 0.5 * share
    return 0.0


def _shown(value: Any) -> Any:
    """A value as ``run_query`` shows it: JSON, and at most :data:`MAX_SHOWN_CHARS` characters."""
    if isinstance(value, bytes):  # a BLOB, as SQL writes one: X'0A1B'
        half = MAX_SHOWN_CHARS // 2
        return "X'" + value[:half].hex().upper() + ("...'" if len(value) > half else "'")
    if isinstance(value, str) and len(value) > MAX_SHOWN_CHARS:
        return value[:MAX_SHOWN_CHARS] + f"... ({len(value)} characters)"
    if isinstance(value, float) and not math.isfinite(value):  # 1e999: not JSON
        return str(value)
    return value


class SqlEnvironment(openenv.Environment):
    """Answer questions about shipped SQLite databases with SELECT queries."""

    name = "sql_env"
    version = "0.1.0"
    description = "Text-to-SQL over shipped SQLite databases; reward 1 when the result equals the reference's, else 0."
    deterministic = True
    max_sessions = 128
    max_episode_steps = 15
    reward_range = (0.0, 1.0)
    example_actions = (
        openenv.CallToolAction("schema", {}),
        openenv.CallToolAction("run_query", {"sql": "SELECT COUNT(*) FROM customers"}),
        openenv.CallToolAction("submit", {"sql": "SELECT 1"}),
    )
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "kind": "sql", "tasks": len(questions())}
    # RFC 0015: submit grades; strict feedback by default (its result is the reward), rich on
    # request at reset (the score's detail: rows returned, expected, in common).
    grading = openenv.Grading(offers=("strict", "rich"), public_metadata=("question_id", "db"))
    partial_credit: ClassVar[bool] = False
    """Opt-in partial credit (:func:`score`): a strict part of the answer, or the right rows in
    the wrong order, earns up to 0.5. Off by default; set it on a subclass. Unlike the shaping
    it replaces (0.5 x Jaccard, which paid up to 0.125 for supersets and enumerations), it pays
    nothing for a constant, an empty result, a superset or an enumeration."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.conn: sqlite3.Connection | None = None
        self._start(options.get("seed"), options)

    @classmethod
    def grading_probes(cls) -> list[openenv.GradingProbe]:
        """Six questions of both databases: the reference query earns 1; a query with no rows,
        a constant and another question's reference earn 0."""
        qs = {q["id"]: q for q in questions()}
        pairs = [("shop-02", "shop-05"), ("shop-04", "shop-09"), ("shop-07", "shop-15")]
        pairs += [("school-02", "school-05"), ("school-04", "school-09"), ("school-11", "school-01")]

        def submit(sql: str) -> list[openenv.CallToolAction]:
            return [openenv.CallToolAction("submit", {"sql": sql})]

        return [
            openenv.GradingProbe(
                options={"question_id": qid},
                reference=submit(qs[qid]["sql"]),
                null=[submit("SELECT 1 WHERE 0"), submit("SELECT NULL")],
                replay=[submit(qs[other]["sql"])],
            )
            for qid, other in pairs
        ]

    def _start(self, seed: Any, options: Mapping[str, Any]) -> None:
        qs = questions()
        qid = options.get("question_id")
        if qid is not None:
            match = [q for q in qs if q["id"] == qid]
            if not match:
                raise openenv.InvalidArgument(f"no question {qid!r}")
            self.task = match[0]
        else:
            try:
                self.task = random.Random(None if seed is None else int(seed)).choice(qs)
            except (TypeError, ValueError):
                raise openenv.InvalidArgument(f"bad seed {seed!r}") from None
        if self.conn is not None:
            self.conn.close()
        self.conn = _connect(self.task["db"])
        self.reward_value: float | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        self._start(seed, options or {})
        text = f"Database: {self.task['db']}. {self.task['question']}\nAnswer with one SELECT via submit(sql)."
        obs = openenv.CallToolObservation("", openenv.ToolResult([{"type": "text", "text": text}]))
        return openenv.StepResult(obs, metadata={"question_id": self.task["id"], "db": self.task["db"]})

    def _query(self, sql: str, keep: int) -> tuple[list[str], list[tuple[Any, ...]], int]:
        assert self.conn is not None
        return _execute(self.conn, sql, keep)

    @openenv.tool(annotations={"readOnlyHint": True})
    def schema(self) -> str:
        """The database's CREATE TABLE statements."""
        return "\n".join(line for line in _script(self.task["db"]).splitlines() if line.startswith("CREATE"))

    @openenv.tool(annotations={"readOnlyHint": True})
    def run_query(self, sql: str) -> dict[str, Any]:
        """Run a read-only query: its columns, at most 50 rows (long values cut) and its row count.

        Args:
            sql: one SQLite SELECT statement.
        """
        cols, rows, count = self._query(sql, MAX_ROWS)
        return {"columns": cols, "rows": [[_shown(v) for v in r] for r in rows], "row_count": count}

    @openenv.tool(grades={"argument": "sql", "language": "sql"})
    def submit(self, sql: str) -> dict[str, Any]:
        """Submit the query that answers the question; this ends the episode. The reward is 1
        when its result equals the reference's, else 0.

        Args:
            sql: one SQLite SELECT statement.
        """
        # The reference first: if it cannot run (the process's heap is full), nothing is graded
        # and the call is an error (the episode goes on); a failing submission earns 0.
        _, want, _ = self._query(self.task["sql"], 1_000_000)
        ordered = "order by" in self.task["sql"].lower()
        try:
            # One row more than the answer is enough to know a result is not the answer; a few
            # more tell rich feedback how many rows the two share.
            _, got, count = self._query(sql, len(want) + DETAIL_ROWS)
        except ValueError as e:
            self.reward_value = 0.0
            return {"score": 0.0, "error": str(e)}
        self.reward_value = score(got, want, ordered, partial=self.partial_credit)
        common = sum((Counter(map(_norm, got)) & Counter(map(_norm, want))).values())
        return {
            "score": self.reward_value,
            "row_count": count,
            "expected_row_count": len(want),
            "rows_in_common": common if count == len(got) else None,
            "same_width": bool(got) and bool(want) and len(got[0]) == len(want[0]),
            "ordered": ordered,
        }

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        done = action.tool_name == "submit" and self.reward_value is not None
        return openenv.StepResult(observation, reward=self.reward_value if done else 0.0, terminated=done)

    def state(self) -> dict[str, Any]:
        # The verdict appears here as the reward only (RFC 0015): two submissions with the same
        # reward leave the same state.
        return {"question_id": self.task["id"], "db": self.task["db"], "score": self.reward_value}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the SQL environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(SqlEnvironment, ns.host, ns.port, ready=lambda s: print(f"sql_env serving on {s.address}"))


if __name__ == "__main__":
    main()
