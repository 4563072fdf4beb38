"""``openenv.TaskSet``: the one task set that coding_env, repo_env, terminal_env and harbor_env
subclass (issue 55: it was defined four times). What environments and their users rely on: unique
ids, a stable order, the same task for the same seed on every machine, refusals that name what
is wrong, and an environment's own error class."""

from __future__ import annotations

import dataclasses
import random

import pytest

import openenv
from openenv.runtime.tasks import TaskSet


@dataclasses.dataclass(frozen=True)
class _Task:
    id: str
    split: str = "train"


_TASKS = [_Task("a"), _Task("b", "test"), _Task("c"), _Task("d", "validation")]


def test_order_ids_splits_and_lookups() -> None:
    """Iteration and indexing keep the given order; splits come in first-appearance order;
    by_id and in_split find tasks and refuse unknown ones naming what is known."""
    ts = TaskSet(_TASKS, ["."])
    assert openenv.TaskSet is TaskSet
    assert [t.id for t in ts] == ["a", "b", "c", "d"] and ts[1].id == "b" and len(ts) == 4
    assert [t.id for t in ts[1:3]] == ["b", "c"]
    assert ts.splits == ("train", "test", "validation")
    assert ts.by_id("c") is _TASKS[2]
    with pytest.raises(KeyError, match="no task 'x'; known: a, b, c, d"):
        ts.by_id("x")
    assert [t.id for t in ts.in_split("train")] == ["a", "c"] and len(ts.in_split(None)) == 4
    with pytest.raises(KeyError, match="no split 'dev'"):
        ts.in_split("dev")
    assert ts.sources and all(s.startswith("/") for s in ts.sources)


def test_sample_is_the_same_for_a_seed_on_every_machine_and_respects_the_split() -> None:
    """The choice is ``random.Random(seed).choice`` over the split's tasks in order: reproducible
    anywhere, and never outside the split asked for."""
    ts = TaskSet(_TASKS)
    for seed in range(50):
        assert ts.sample(seed) is random.Random(seed).choice(_TASKS)
        assert ts.sample(seed, "train").split == "train"
    with pytest.raises(ValueError, match="unknown split 'dev'; splits: train, test, validation"):
        ts.sample(1, "dev")


def test_refusals_raise_the_environments_error_and_a_subclass_says_where_duplicates_came_from() -> None:
    """No task and a duplicate id are refused with the class's ``error`` (an environment's own
    TaskError), the duplicate's message from ``duplicate`` (harbor_env names both directories)."""
    with pytest.raises(ValueError, match="duplicate task id 'a'"):
        TaskSet([_Task("a"), _Task("a", "test")])
    with pytest.raises(ValueError, match="no tasks"):
        TaskSet([])
    assert len(TaskSet([], allow_empty=True)) == 0

    class MyError(ValueError):
        pass

    class Mine(TaskSet[_Task]):
        error = MyError

        def duplicate(self, first: _Task, second: _Task) -> str:
            return f"{second.id} is in {first.split} and {second.split}"

    with pytest.raises(MyError, match="a is in train and test"):
        Mine([_Task("a"), _Task("a", "test")])


def test_the_environments_task_sets_are_this_one() -> None:
    """The four environments that ship tasks subclass it (one implementation, their additions only)."""
    from harbor_env.task import TaskSet as Harbor

    from coding_env.tasks import TaskSet as Coding
    from repo_env.tasks import TaskSet as Repo
    from terminal_env.tasks import TaskSet as Terminal

    for cls in (Coding, Harbor, Repo, Terminal):
        assert issubclass(cls, TaskSet) and "__init__" not in vars(cls) and "by_id" not in vars(cls), cls
