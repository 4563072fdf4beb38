"""The Task API (RFC 0004) over a real socket: splits are advertised, list_tasks pages through
them, a reset names its task (plain and vectorised, a GRPO group sharing one), and bad task
requests get clear errors without harming the session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
from openenv_testenvs import Counter
from openenv_testkit import running

import openenv

pytestmark = pytest.mark.anyio


class Quiz(openenv.Environment):
    """Tasks q0..q4 (train) and h0..h2 (test); the observation says which task is played."""

    task_splits: ClassVar[dict[str, str]] = {"train": "five", "test": "three held out"}

    @classmethod
    def list_tasks(cls, split: str) -> list[Any]:
        if split == "train":
            return [openenv.TaskInfo(f"q{i}", metadata={"level": i}) for i in range(5)]
        return [f"h{i}" for i in range(3)]  # plain ids are fine too

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return {"task": (options or {}).get("task_id", "chosen"), "seed": seed}

    def step(self, action: Any) -> openenv.StepResult:
        return openenv.StepResult({"task": "", "seed": None}, reward=1.0, terminated=True)


async def test_splits_are_advertised_and_listed_in_pages() -> None:
    async with running(Quiz) as srv, openenv.EnvClient(srv.address) as c:
        assert c.info is not None and c.info.capabilities.tasks
        assert c.task_splits == {"train": 5, "test": 3}
        train = await c.list_tasks()
        assert [t.id for t in train] == [f"q{i}" for i in range(5)]
        assert train[2].metadata == {"level": 2} and train[2].split == "train"
        assert [t.id for t in await c.list_tasks("test")] == ["h0", "h1", "h2"]
        assert [t.id for t in await c.list_tasks("train", limit=2)] == ["q0", "q1"]


async def test_reset_plays_the_named_task() -> None:
    async with running(Quiz) as srv, openenv.EnvClient(srv.address) as c:
        assert (await c.reset(seed=3, task_id="h1")).observation == {"task": "h1", "seed": 3}
        assert (await c.reset()).observation == {"task": "chosen", "seed": None}


async def test_a_vectorised_reset_shares_one_task_or_takes_one_each() -> None:
    async with running(Quiz) as srv, openenv.EnvClient(srv.address, num_envs=4) as c:
        b = await c.reset_batch(seeds=[10], task_ids=["q3"])  # a GRPO group: one task, four seeds
        assert [o["task"] for o in b.observations] == ["q3"] * 4
        assert [o["seed"] for o in b.observations] == [10, 11, 12, 13]
        b = await c.reset_batch(task_ids=["q0", "q1", "h0", "h2"])
        assert [o["task"] for o in b.observations] == ["q0", "q1", "h0", "h2"]
        with pytest.raises(openenv.InvalidArgument):
            await c.reset_batch(task_ids=["q0", "q1"])


async def test_bad_task_requests_are_refused_and_the_session_goes_on() -> None:
    async with running(Quiz) as srv, openenv.EnvClient(srv.address) as c:
        with pytest.raises(openenv.NotFound):
            await c.reset(task_id="nope")
        with pytest.raises(openenv.NotFound):
            await c.list_tasks("validation")
        with pytest.raises(openenv.InvalidArgument):
            await c.reset(options={"task_id": "q1"}, task_id="q2")
        assert (await c.reset(task_id="q4")).observation["task"] == "q4"
    async with running(Counter) as srv, openenv.EnvClient(srv.address) as c:
        assert c.info is not None and not c.info.capabilities.tasks and c.task_splits == {}
        with pytest.raises(openenv.Unimplemented):
            await c.list_tasks()
        with pytest.raises(openenv.Unimplemented):
            await c.reset(task_id="q0")
        await c.reset()


def test_duplicate_task_ids_are_refused_at_start() -> None:
    class Twice(Quiz):
        @classmethod
        def list_tasks(cls, split: str) -> list[Any]:
            return ["same"]

    with pytest.raises(ValueError, match="declared twice"):
        openenv.Server(Twice, "127.0.0.1", 0)
