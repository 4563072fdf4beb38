"""``ors:URL``: an environment of an Open Reward Standard server as an openenv environment.

``URL`` is the ORS server's base URL and the environment's name, ``http://host:port/NAME``
(``http://host:port`` alone when the server serves exactly one environment). The ORS SDK's
client (``pip install 'protoenv-catalog[ors]'``) talks to it; ``ORS_API_KEY`` is sent when set.

* **Tools**: the ORS environment's tools, with their input schemas (checked before a call is
  forwarded); each call is one step of an ORS session, and the tool's output blocks are its
  result. A call the ORS server refuses is an error result of that step.
* **Tasks** (RFC 0004): the ORS splits, each task ``SPLIT/INDEX``; a task's content (its
  ``task_spec``, which may hold the answer) never reaches the agent, only the prompt does.
  ``reset(options={"task_id": ...})`` opens an ORS session on that task, ``reset(seed=s)`` on
  task ``s`` of all of them, in order.
* **Reward**: the ORS tool output's ``reward`` (0 when it gives none); its ``finished`` ends the
  episode. The verdict is computed by the ORS server, behind this one: the agent sees neither.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import openenv
from openenv.runtime.tools import Tool, ToolDef, grading_annotation
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["ORSEnvironment", "load"]

CURATED: tuple[str, ...] = ()
"""None: an ORS environment lives on a server the catalog does not run."""

MAX_TASKS = 100_000


def _ors() -> Any:
    try:
        from ors.client import ORS
    except ImportError as e:
        raise ImporterUnavailable(f"the ORS SDK is not installed: pip install 'protoenv-catalog[ors]' ({e})") from e
    return ORS


def _split_url(url: str) -> tuple[str, str | None]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"ors:{url}: expected ors:http(s)://host:port/ENVIRONMENT")
    name = parts.path.strip("/") or None
    return f"{parts.scheme}://{parts.netloc}", name


def _schema_validator(schema: Mapping[str, Any]) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _text(blocks: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for b in blocks or []:
        if getattr(b, "type", "text") == "image":
            out.append({"type": "image", "data": b.data, "mimeType": b.mimeType})
        else:
            out.append({"type": "text", "text": str(getattr(b, "text", ""))})
    return out


class _Client:
    """One ORS SDK client (its own event loop) used from one thread at a time."""

    def __init__(self, base: str, name: str) -> None:
        self.lock = threading.Lock()
        self.ors = _ors()(base_url=base, api_key=os.environ.get("ORS_API_KEY"))
        self.env = self.ors.environment(name)

    def close(self) -> None:
        with self.lock:
            self.ors.close()


class ORSEnvironment(openenv.Environment):
    """Base of imported ORS environments (one subclass per server environment, made by :func:`load`)."""

    ors_base: ClassVar[str] = ""
    ors_name: ClassVar[str] = ""
    ors_splits: ClassVar[tuple[str, ...]] = ()
    ors_counts: ClassVar[tuple[int, ...]] = ()
    run_in_thread = True
    max_sessions = 32
    max_episode_steps = 50
    # Every ORS call may grade (RFC 0015): strict by default, so a training episode's agent sees
    # each call's reward only; an evaluation may ask for the ORS outputs ("rich" at reset).
    grading = openenv.Grading(feedback="strict", offers=("strict", "rich"))
    # Tools are read from the server after the class exists: declare what they make of steps.
    action_type = openenv.CallToolAction
    observation_type = openenv.CallToolObservation

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._client = _Client(self.ors_base, self.ors_name)
        self._session: Any = None
        self._finished = False
        self._reward = 0.0

    @classmethod
    def list_tasks(cls, split: str) -> list[openenv.TaskInfo]:
        if split not in cls.ors_splits:
            return []
        n = cls.ors_counts[cls.ors_splits.index(split)]
        return [openenv.TaskInfo(f"{split}/{i}", split, {}) for i in range(n)]

    def _task(self, seed: Any, options: Mapping[str, Any]) -> tuple[str, int]:
        task_id = options.get("task_id")
        if task_id is not None:
            split, _, index = str(task_id).rpartition("/")
            if split not in self.ors_splits or not index.isdigit():
                raise openenv.InvalidArgument(f"unknown task {task_id!r} (tasks are SPLIT/INDEX)")
            i = int(index)
            if i >= self.ors_counts[self.ors_splits.index(split)]:
                raise openenv.InvalidArgument(f"unknown task {task_id!r}: {split} has fewer tasks")
            return split, i
        total = sum(self.ors_counts)
        if total == 0:
            raise openenv.FailedPrecondition(f"the ORS environment {self.ors_name} has no tasks")
        k = (0 if seed is None else int(seed)) % total
        for split, n in zip(self.ors_splits, self.ors_counts, strict=True):
            if k < n:
                return split, k
            k -= n
        raise AssertionError("unreachable")

    def _end_session(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            with self._client.lock:
                session.__exit__(None, None, None)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        split, index = self._task(seed, {**self.options, **(options or {})})
        self._end_session()
        with self._client.lock:
            session = self._client.env.session(split=split, index=index)
            session.__enter__()
            self._session = session
            prompt = session.get_prompt()
        self._finished = False
        obs = openenv.CallToolObservation("", openenv.ToolResult(_text(prompt)))
        return openenv.StepResult(obs, metadata={"task_id": f"{split}/{index}"})

    def _call(self, name: str, arguments: dict[str, Any]) -> openenv.ToolResult:
        if self._session is None:
            raise openenv.FailedPrecondition("no episode: reset first")
        from ors.client import ToolCallError

        self._reward = 0.0
        try:
            with self._client.lock:
                out = self._session.call_tool(name, arguments)
        except ToolCallError as e:
            return openenv.ToolResult([{"type": "text", "text": str(e)}], is_error=True)
        self._reward = float(out.reward) if out.reward is not None else 0.0
        self._finished = self._finished or bool(out.finished)
        return openenv.ToolResult(_text(out.blocks))

    def finish_tool_step(
        self, action: openenv.CallToolAction, observation: openenv.CallToolObservation
    ) -> openenv.StepResult:
        """The ORS reward of the call (0 when it gave none); its ``finished`` ends the episode."""
        reward, self._reward = self._reward, 0.0
        return openenv.StepResult(observation, reward=reward, terminated=self._finished)

    def state(self) -> dict[str, Any]:
        return {"environment": self.ors_name, "finished": self._finished}

    def close(self) -> None:
        try:
            self._end_session()
        finally:
            self._client.close()


def _tool(spec: Any) -> ToolDef:
    name = str(spec.name)
    schema = dict(spec.input_schema or {"type": "object", "properties": {}})
    validator = _schema_validator(schema)

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise openenv.InvalidArgument(f"tool {name!r}: arguments must be an object")
        errors = list(validator.iter_errors(arguments))
        if errors:
            raise openenv.InvalidArgument(f"tool {name!r}: invalid arguments: {errors[0].message}")
        return arguments

    def call(self: ORSEnvironment, **arguments: Any) -> openenv.ToolResult:
        return self._call(name, arguments)

    # Any ORS call may grade the episode (its output carries the reward): a grading tool (RFC 0015).
    return ToolDef(
        call, Tool(name, str(spec.description or ""), schema, None, grading_annotation(True)), False, None, validate
    )


@functools.lru_cache(maxsize=64)
def _describe(base: str, name: str) -> tuple[tuple[str, ...], tuple[int, ...], list[Any]]:
    client = _Client(base, name)
    try:
        with client.lock:
            splits = tuple(str(s) for s in client.env.list_splits())
            counts = tuple(min(int(client.env.num_tasks(s)), MAX_TASKS) for s in splits)
            specs = list(client.env.list_tools())
    finally:
        client.close()
    return splits, counts, specs


def _read_in_thread(base: str, name: str) -> tuple[tuple[str, ...], tuple[int, ...], list[Any]]:
    """:func:`_describe` on a thread of its own: the ORS SDK's synchronous client runs its own
    event loop (``run_until_complete``), which refuses to start on a thread whose loop is
    running, so ``load`` called from async code (an ``async def main`` serving the import) would
    fail; on a fresh thread it works whoever calls."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ors-describe") as pool:
        return pool.submit(_describe, base, name).result()


def load(url: str) -> type[ORSEnvironment]:
    """The environment class of the ORS environment at ``url`` (see the module's text): its
    tools, splits and task counts are read from the server once."""
    base, name = _split_url(url)
    if name is None:
        import httpx

        names = httpx.get(f"{base}/list_environments", timeout=30).json()
        if not isinstance(names, list) or len(names) != 1:
            raise LookupError(f"ors:{url}: the server serves {names!r}; name one: ors:{base}/NAME")
        name = str(names[0])
    splits, counts, specs = _read_in_thread(base, name)
    tools = {t.name: _tool(t) for t in specs}
    ident = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    attrs: dict[str, Any] = {
        "name": f"ors-{ident}",
        "version": "0.1",
        "description": f"The ORS environment {name} at {base}, imported: its tools, tasks and rewards.",
        "ors_base": base,
        "ors_name": name,
        "ors_splits": splits,
        "ors_counts": counts,
        "task_splits": {s: f"the ORS environment's {s} split" for s in splits},
        "metadata": {"source": f"ors:{base}/{name}", "kind": "ors"},
    }
    cls: type[ORSEnvironment] = type(f"ORS_{ident.replace('-', '_')}", (ORSEnvironment,), attrs)
    cls.__openenv_tools__ = {**cls.__openenv_tools__, **tools}
    return cls
