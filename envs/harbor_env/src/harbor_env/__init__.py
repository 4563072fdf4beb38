"""Harbor-format tasks as an openenv environment (docs/harbor.md).

``HarborEnvironment`` serves a task directory, a directory of tasks, or a directory of splits
(``$HARBOR_TASKS``; by default the shipped set in ``harbor_env/tasks``); ``harbor-env check DIR``
checks that each task's reference solution passes its tests and a null solution does not.
"""

from harbor_env.task import HarborTask, TaskError, TaskSet, load_task, load_tasks

__all__ = ["HarborEnvironment", "HarborTask", "TaskError", "TaskSet", "load_task", "load_tasks"]


def __getattr__(name: str) -> object:
    if name == "HarborEnvironment":
        from harbor_env.server import HarborEnvironment

        return HarborEnvironment
    raise AttributeError(name)
