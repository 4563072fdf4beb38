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
from collections.abc import Mapping, Sequence
from typing import Any

from openenv.errors import InvalidArgument, NotFound, Unimplemented
from openenv.v1 import task_pb2
from openenv.values import from_struct, to_struct

__all__ = [
    "MAX_TASKS_PAGE",
    "TASK_OPTION",
    "TaskCatalog",
    "TaskInfo",
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
