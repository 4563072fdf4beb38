"""The public task API of the coding environment: a user's own tasks with hidden tests, from
Python, JSON Lines, JSON or Parquet, served and graded like the shipped ones (over a real gRPC
server on loopback), and every malformed file refused with where and why."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

import openenv
from coding_env import Case, CodingEnvironment, Task, TaskError, load_tasks
from openenv import CallToolAction

MINE = [
    {
        "id": "double",
        "prompt": "Double a number.",
        "entry_point": "double",
        "public": [{"args": [2], "expected": 4}],
        "hidden": [{"args": [5], "expected": 10}, {"args": [-1], "expected": -2}, {"args": [0], "expected": 0}],
    },
    {
        "id": "join_words",
        "prompt": "Join words with single spaces.",
        "entry_point": "join_words",
        "split": "test",
        "public": [{"args": [["a", "b"]]}],
        "hidden": [{"args": [["x"]]}, {"args": [[]]}, {"args": [["p", "q", "r"]]}],
        "reference": "def join_words(ws):\n    return ' '.join(ws)\n",
    },
]


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_tasks_load_from_every_format_alike(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    jsonl = load_tasks(_jsonl(tmp_path / "t.jsonl", MINE))
    (tmp_path / "t.json").write_text(json.dumps(MINE))
    as_json = load_tasks(tmp_path / "t.json")
    keys = ("id", "prompt", "entry_point", "split", "public", "hidden", "reference")
    rows = [
        {k: r.get(k) for k in keys} | {"public": json.dumps(r["public"]), "hidden": json.dumps(r["hidden"])}
        for r in MINE
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    parquet = load_tasks(tmp_path / "t.parquet")
    for tasks in (jsonl, as_json, parquet):
        assert [t.id for t in tasks] == ["double", "join_words"] and tasks.splits == ("train", "test")
        join = tasks.by_id("join_words")
        assert [join.expected(c) for c in join.hidden] == ["x", "", "p q r"]  # from the reference
        assert tasks.by_id("double").expected(tasks.by_id("double").hidden[0]) == 10
    assert jsonl.sources == (os.path.realpath(tmp_path / "t.jsonl"),)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"prompt": "x", "entry_point": "f", "hidden": [{"args": [1], "expected": 1}]}], "missing field 'id'"),
        (
            [{"id": "a", "entry_point": "not valid", "hidden": [{"args": [1], "expected": 1}]}],
            "not a Python identifier",
        ),
        ([{"id": "a", "entry_point": "f", "hidden": []}], "no hidden cases"),
        (
            [{"id": "a", "entry_point": "f", "hidden": [{"args": [1]}]}],
            "no expected value and the task has no reference",
        ),
        ([{"id": "a", "entry_point": "f", "hidden": [{"expected": 1}]}], "a case needs 'args'"),
        ([{"id": "a", "entry_point": "f", "hidden": [{"args": 1, "expected": 1}]}], "'args' must be a list"),
        (
            [{"id": "a", "entry_point": "f", "hidden": [{"args": [1]}], "reference": "def g(x):\n    return x\n"}],
            "defines no function 'f'",
        ),
        (
            [{"id": "a", "entry_point": "f", "hidden": [{"args": [1]}], "reference": "def f(x):\n    return 1 / 0\n"}],
            "ZeroDivisionError",
        ),
        ([{"id": "a", "entry_point": "f", "hidden": [{"args": [1], "expected": 1}], "extra": 1}], "unknown fields"),
        ([{"id": "a", "entry_point": "f", "hidden": [{"args": [1], "expected": 1}]}] * 2, "duplicate task id 'a'"),
        ([], "no tasks"),
        (["not an object"], "a task is an object"),
    ],
)
def test_a_malformed_task_file_is_refused_saying_where_and_why(
    tmp_path: Path, records: list[Any], message: str
) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(TaskError, match=message) as err:
        load_tasks(path)
    assert str(path) in str(err.value)


def test_unreadable_and_unknown_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no task file"):
        load_tasks(tmp_path / "missing.jsonl")
    (tmp_path / "t.csv").write_text("id\n")
    with pytest.raises(TaskError, match="unknown task file type"):
        load_tasks(tmp_path / "t.csv")
    (tmp_path / "t.jsonl").write_text('{"id": "a"\n')
    with pytest.raises(TaskError, match=r"t\.jsonl:1: not valid JSON"):
        load_tasks(tmp_path / "t.jsonl")


def _serve(env_cls: type[openenv.Environment], fn: Any) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
            return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), 120))


def test_a_users_tasks_are_served_and_graded_by_their_hidden_tests(tmp_path: Path) -> None:
    my_coding = CodingEnvironment.with_tasks(load_tasks(_jsonl(tmp_path / "mine.jsonl", MINE)), name="my_coding")
    assert my_coding.name == "my_coding" and set(my_coding.task_splits) == {"train", "test"}
    # The task file is a secret: checked invisible inside the sandbox.
    assert os.path.realpath(tmp_path / "mine.jsonl") in my_coding.secrets()

    async def go(env: Any) -> Any:
        tasks = [t.id for t in await env.list_tasks("test")]
        out = {}
        for code, key in (
            ("def join_words(ws):\n    return ' '.join(ws)\n", "right"),
            ("def join_words(ws):\n    return ','.join(ws)\n", "wrong"),  # right only on one word and none
        ):
            # Rich feedback: the pass counts are checked (strict feedback returns the reward only).
            first = await env.reset(task_id="join_words", options={"feedback": "rich"})
            out[key] = await env.step(CallToolAction("submit", {"code": code}))
        return tasks, first, out

    tasks, first, out = _serve(my_coding, go)
    assert tasks == ["join_words"]
    assert (
        "Join words" in first.observation.result.text
        and "join_words(['a', 'b']) == 'a b'" in first.observation.result.text
    )
    assert out["right"].reward == 1.0
    assert out["wrong"].observation.result.data == {"passed": 2, "total": 3, "load_error": None, "timed_out": False}
    assert out["wrong"].reward == 0.0  # all or nothing


def test_tasks_made_in_python_work_without_a_file() -> None:
    task = Task("double", "Double a number.", "double", public=[Case((2,), 4)], hidden=[Case((5,), 10), Case((7,), 14)])
    my_coding = CodingEnvironment.with_tasks([task])

    async def go(env: Any) -> Any:
        await env.reset(seed=1)
        return await env.step(CallToolAction("submit", {"code": "def double(x):\n    return x + x\n"}))

    assert _serve(my_coding, go).reward == 1.0
