"""Tasks and splits (RFC 0004): what an environment declares, and the catalogue the runtime
builds from it once per server.

An environment declares ``task_splits`` (split name -> description, the first is the default)
and a classmethod ``list_tasks(split)`` returning :class:`TaskInfo` values (or plain ids). The
runtime reads them once when a server starts (:class:`TaskCatalog`): the split sizes are
advertised in ``EnvironmentInfo.task_splits``, ``list_tasks`` pages through them, and a reset
that names a task (``ResetRequest.task_id``) is checked against them and reaches the
environment's ``reset`` as ``options["task_id"]``.

What you may rely on: task ids are strings, unique across splits; the order of a split is the
environment's and stable for the life of the server.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, overload

from openenv.errors import InvalidArgument, NotFound, Unimplemented
from openenv.v1 import task_pb2
from openenv.values import from_struct, to_struct

__all__ = [
    "MAX_TASKS_PAGE",
    "TASK_OPTION",
    "TaskCatalog",
    "TaskInfo",
    "TaskSet",
    "answer_list_tasks",
    "per_instance_tasks",
    "with_task",
]

MAX_TASKS_PAGE = 1000
"""Most tasks one ``list_tasks`` answer carries (``ListTasksRequest.limit`` is capped to it)."""

TASK_OPTION = "task_id"
"""The reset option under which the environment receives the task of ``ResetRequest.task_id``."""


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """One task: its id (unique within the environment), its split and JSON-like metadata
    that a policy may see (never the answer)."""

    id: str
    split: str = ""
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_proto(self, out: task_pb2.TaskInfo | None = None) -> task_pb2.TaskInfo:
        out = task_pb2.TaskInfo() if out is None else out
        out.id, out.split = self.id, self.split
        if self.metadata:
            to_struct(dict(self.metadata), out.metadata)
        return out

    @classmethod
    def from_proto(cls, t: task_pb2.TaskInfo) -> TaskInfo:
        return cls(t.id, t.split, from_struct(t.metadata))


class _HasIdAndSplit(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def split(self) -> str: ...


T = TypeVar("T", bound=_HasIdAndSplit)


class TaskSet(Sequence[T], Generic[T]):
    """An environment's tasks (anything with an ``id`` and a ``split``) with unique ids, in a
    stable order: the one task set of every environment that ships tasks (coding_env, repo_env,
    terminal_env, harbor_env), subclassed for what one of them adds.

    ``sources``: the files the tasks came from (real paths). Refusals (a duplicate id, no task)
    raise :attr:`error` (``ValueError``, or a subclass an environment names).

    What you may rely on: iteration and indexing in the given order; :meth:`sample` gives the
    same task for the same seed on every machine; :attr:`splits` in the order they first appear.
    """

    error: ClassVar[type[Exception]] = ValueError

    def __init__(
        self, tasks: Iterable[T], sources: Iterable[str | os.PathLike[str]] = (), *, allow_empty: bool = False
    ) -> None:
        self._tasks = tuple(tasks)
        self.sources = tuple(os.path.realpath(s) for s in sources)
        self._by_id: dict[str, T] = {}
        for t in self._tasks:
            if t.id in self._by_id:
                raise self.error(self.duplicate(self._by_id[t.id], t))
            self._by_id[t.id] = t
        if not self._tasks and not allow_empty:
            raise self.error("no tasks")

    def duplicate(self, first: T, second: T) -> str:
        """The message refusing two tasks with one id (a subclass may say where each came from)."""
        return f"duplicate task id {second.id!r}"

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        return self._tasks[i]

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[T]:
        return iter(self._tasks)

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits, in the order they first appear."""
        return tuple(dict.fromkeys(t.split for t in self._tasks))

    def by_id(self, task_id: str) -> T:
        """The task ``task_id``; KeyError naming (up to 20 of) the known ones."""
        try:
            return self._by_id[task_id]
        except KeyError:
            known = sorted(self._by_id)
            more = ", ..." if len(known) > 20 else ""
            raise KeyError(f"no task {task_id!r}; known: {', '.join(known[:20])}{more}") from None

    def in_split(self, split: str | None) -> list[T]:
        """The tasks of ``split`` (all for None); KeyError naming the splits when it has none."""
        if split is None:
            return list(self._tasks)
        out = [t for t in self._tasks if t.split == split]
        if not out:
            raise KeyError(f"no split {split!r} (splits: {', '.join(self.splits)})")
        return out

    def sample(self, seed: int | None, split: str | None = None) -> T:
        """The task of ``seed`` among ``split`` (all by default): the same on every machine; a
        random one without a seed. ValueError naming the splits for an unknown one."""
        return self._choose(seed, [t for t in self._tasks if split is None or t.split == split], split=split)

    def _choose(self, seed: int | None, pool: Sequence[T], **asked: str | None) -> T:
        if not pool:
            if asked.get("split") is not None and asked["split"] not in self.splits:
                raise ValueError(f"unknown split {asked['split']!r}; splits: {', '.join(self.splits)}")
            raise ValueError(f"no task with {', '.join(f'{k} {v!r}' for k, v in asked.items())}")
        return random.Random(seed).choice(pool)


class TaskCatalog:
    """The tasks of one environment class, read once from its declarations."""

    def __init__(self, splits: Mapping[str, str], lister: Any) -> None:
        self.descriptions = dict(splits)
        self.splits: dict[str, list[TaskInfo]] = {}
        self.index: dict[str, TaskInfo] = {}
        for name in self.descriptions:
            tasks = []
            for t in lister(name):
                info = t if isinstance(t, TaskInfo) else TaskInfo(str(t))
                info = dataclasses.replace(info, id=str(info.id), split=name)
                if info.id in self.index:
                    raise ValueError(f"task id {info.id!r} is declared twice (task ids are unique across splits)")
                self.index[info.id] = info
                tasks.append(info)
            self.splits[name] = tasks

    @classmethod
    def of(cls, env_cls: Any) -> TaskCatalog | None:
        """The catalogue of an environment class, or None when it declares no task splits."""
        splits = getattr(env_cls, "task_splits", None)
        if not splits:
            return None
        if not isinstance(splits, Mapping):
            splits = {str(s): "" for s in splits}
        return cls(splits, env_cls.list_tasks)

    def split_protos(self) -> list[task_pb2.TaskSplit]:
        return [
            task_pb2.TaskSplit(name=n, size=len(self.splits[n]), description=self.descriptions[n]) for n in self.splits
        ]

    def page(self, split: str, offset: int, limit: int, out: task_pb2.ListTasksResponse) -> None:
        """Fill one page of ``split`` (empty: the default split) into ``out``."""
        name = split or next(iter(self.splits))
        tasks = self.splits.get(name)
        if tasks is None:
            raise NotFound(f"unknown task split {name!r}; known: {', '.join(self.splits)}")
        limit = MAX_TASKS_PAGE if limit <= 0 else min(limit, MAX_TASKS_PAGE)
        chunk = tasks[offset : offset + limit]
        for t in chunk:
            t.to_proto(out.tasks.add())
        out.total = len(tasks)
        out.next_offset = min(offset + len(chunk), len(tasks)) if chunk else len(tasks)

    def reset_options(self, task_id: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """The reset options that carry ``task_id`` to the environment (checked first)."""
        if task_id not in self.index:
            raise NotFound(f"unknown task {task_id!r}: list_tasks shows this environment's tasks")
        out = dict(options or {})
        if TASK_OPTION in out and str(out[TASK_OPTION]) != task_id:
            raise InvalidArgument(f"options[{TASK_OPTION!r}] contradicts task_id {task_id!r}")
        out[TASK_OPTION] = task_id
        return out


def answer_list_tasks(
    catalog: TaskCatalog | None, req: task_pb2.ListTasksRequest, out: task_pb2.ListTasksResponse
) -> None:
    """Answer a ``list_tasks`` request (UNIMPLEMENTED without declared tasks)."""
    if catalog is None:
        raise Unimplemented("this environment declares no tasks (Capabilities.tasks is false)")
    catalog.page(req.split, req.offset, req.limit, out)


def with_task(catalog: TaskCatalog | None, task_id: str, options: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Reset options for a reset naming ``task_id`` (unchanged when it is empty)."""
    if not task_id:
        return options
    if catalog is None:
        raise Unimplemented("this environment declares no tasks (Capabilities.tasks is false)")
    return catalog.reset_options(task_id, options)


def per_instance_tasks(task_ids: Sequence[str], n: int) -> list[str]:
    """The task of each of ``n`` reset instances: none, one shared, or one each."""
    if len(task_ids) == 0:
        return [""] * n
    if len(task_ids) == 1:
        return [task_ids[0]] * n
    if len(task_ids) == n:
        return list(task_ids)
    raise InvalidArgument(f"{len(task_ids)} task ids for {n} instances: give 0, 1 or one per instance")
