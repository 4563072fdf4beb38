"""Text-to-SQL over SQLite: answer a question about a shipped database with one SELECT.

Tools: ``schema()`` (the CREATE statements), ``run_query(sql)`` (columns and at most 50
rows), ``submit(sql)`` (ends the episode). The reward of a submission compares its result
with the reference query's: 1.0 when equal (as multisets of rows; in order when the reference
orders), else 0.5 x the Jaccard similarity of the two row multisets when the column counts
match, else 0. Each session has its own in-memory copy of the database; queries are
read-only (an authorizer allows reading only) and bounded (a progress handler stops one after
a budget of SQLite VM steps).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from collections import Counter
from collections.abc import Mapping
from importlib import resources
from typing import Any, ClassVar

import openenv

MAX_ROWS = 50
MAX_SQL_CHARS = 5000
VM_STEP_BUDGET = 5_000_000
_ALLOWED = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}


def questions() -> list[dict[str, str]]:
    data: list[dict[str, str]] = json.loads(resources.files("sql_env").joinpath("data/questions.json").read_text())
    return data


def _script(db: str) -> str:
    return resources.files("sql_env").joinpath(f"data/{db}.sql").read_text()


def _authorizer(action: int, *args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def _connect(db: str) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(_script(db))
    conn.set_authorizer(_authorizer)
    return conn


def _rows(conn: sqlite3.Connection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    steps = {"n": 0}

    def progress() -> int:
        steps["n"] += 1000
        return 1 if steps["n"] > VM_STEP_BUDGET else 0

    conn.set_progress_handler(progress, 1000)
    try:
        cur = conn.execute(sql)
        cols = [d[0] for d in cur.description or []]
        return cols, [tuple(r) for r in cur.fetchall()]
    except sqlite3.Error as e:
        msg = "the query ran too long" if steps["n"] > VM_STEP_BUDGET else str(e)
        raise ValueError(f"SQL error: {msg}") from None
    finally:
        conn.set_progress_handler(None, 0)


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def score(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], ordered: bool) -> float:
    """1.0 for the same result (ordered when the reference orders), else 0.5 x Jaccard of
    the row multisets when rows have the same width, else 0."""
    g, w = [_norm(r) for r in got], [_norm(r) for r in want]
    if (g == w) if ordered else (Counter(g) == Counter(w)):
        return 1.0
    if not g or not w or len(g[0]) != len(w[0]):
        return 0.0
    cg, cw = Counter(g), Counter(w)
    return 0.5 * sum((cg & cw).values()) / sum((cg | cw).values())


class SqlEnvironment(openenv.Environment):
    """Answer questions about shipped SQLite databases with SELECT queries."""

    name = "sql_env"
    version = "0.1.0"
    description = "Text-to-SQL over shipped SQLite databases; reward by result-set equality with partial credit."
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

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.conn: sqlite3.Connection | None = None
        self._start(options.get("seed"), options)

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

    def _query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        if len(sql) > MAX_SQL_CHARS:
            raise ValueError(f"queries are limited to {MAX_SQL_CHARS} characters")
        assert self.conn is not None
        return _rows(self.conn, sql)

    @openenv.tool(annotations={"readOnlyHint": True})
    def schema(self) -> str:
        """The database's CREATE TABLE statements."""
        return "\n".join(line for line in _script(self.task["db"]).splitlines() if line.startswith("CREATE"))

    @openenv.tool(annotations={"readOnlyHint": True})
    def run_query(self, sql: str) -> dict[str, Any]:
        """Run a read-only query: its columns and at most 50 rows.

        Args:
            sql: one SQLite SELECT statement.
        """
        cols, rows = self._query(sql)
        return {"columns": cols, "rows": [list(r) for r in rows[:MAX_ROWS]], "row_count": len(rows)}

    @openenv.tool
    def submit(self, sql: str) -> dict[str, Any]:
        """Submit the query that answers the question; this ends the episode.

        Args:
            sql: one SQLite SELECT statement.
        """
        try:
            _, got = self._query(sql)
        except ValueError as e:
            self.reward_value = 0.0
            return {"score": 0.0, "error": str(e)}
        _, want = self._query(self.task["sql"])
        self.reward_value = score(got, want, "order by" in self.task["sql"].lower())
        return {"score": self.reward_value, "row_count": len(got)}

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        done = action.tool_name == "submit" and self.reward_value is not None
        return openenv.StepResult(observation, reward=self.reward_value if done else 0.0, terminated=done)

    def state(self) -> dict[str, Any]:
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
