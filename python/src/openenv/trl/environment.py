"""Tool environments as TRL ``GRPOTrainer(environment_factory=...)`` environments.

TRL's contract (trl >= 1.0): the factory returns an object whose public methods are the tools
the model may call (their names, type hints and Google-style docstrings become the tool schemas
of the chat template), whose ``reset(**row)`` starts a rollout (its string is appended to the
prompt) and whose ``get_reward()`` scores the finished rollout. :func:`environment_factory`
builds such a class from an environment server's advertised tools: one session per instance,
every tool call a step (so the environment's reward and rubric score it), and the rollout's
reward the sum of its steps' rewards.
"""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Callable, Mapping
from typing import Any

from openenv.client import SyncEnvClient, ToolEnvClient
from openenv.protocol import StepResult
from openenv.runtime.tools import CallToolAction, Tool

__all__ = ["EnvironmentFactory", "ToolRollout", "environment_factory"]

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list}
_RESERVED = {"reset", "get_reward"}
_EPISODE_OVER = "The episode is over: no more tool calls are accepted."


class ToolRollout:
    """One rollout's environment: a session of the tool environment (base of the generated classes).

    After a rollout: ``rewards`` (one per step, 0.0 where the step had none), ``breakdowns``
    (the rubric's score trees, as dicts), ``tool_calls`` (name, arguments), ``done`` and
    ``task_id``; :meth:`get_reward` is TRL's reward. Public attributes are data, not methods,
    so TRL exposes only the environment's tools.
    """

    _factory: EnvironmentFactory

    def __init__(self) -> None:
        self._client: SyncEnvClient | None = None
        self.rewards: list[float] = []
        self.breakdowns: list[dict[str, Any]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.done = False
        self.task_id: str | None = None
        self.reset_observation: str = ""

    def _session(self) -> SyncEnvClient:
        if self._client is None:
            f = self._factory
            self._client = ToolEnvClient(f.target, **f.client_kwargs).sync().connect()
            f._instances.append(self)
        return self._client

    def reset(self, **row: Any) -> str | None:
        """Start a rollout. ``row`` is the dataset row; its ``task_id`` (RFC 0004) and ``seed``
        columns choose the episode (every member of a GRPO group gets the same row, so the
        same task). Returns the environment's first observation as text (TRL appends it to
        the prompt), or None when it has none."""
        env = self._session()
        task_id = row.get(self._factory.task_column)
        seed = row.get(self._factory.seed_column)
        self.rewards, self.breakdowns, self.tool_calls, self.done = [], [], [], False
        self.task_id = None if task_id is None else str(task_id)
        r = env.reset(None if seed is None else int(seed), None, None, task_id=self.task_id)
        self.reset_observation = _text(r)
        return self.reset_observation or None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.done:
            return _EPISODE_OVER
        args = {k: v for k, v in arguments.items() if v is not None}
        self.tool_calls.append((name, args))
        r = self._session().step(CallToolAction(name, args))
        self.rewards.append(float(r.reward or 0.0))
        if r.reward_breakdown is not None:
            self.breakdowns.append(r.reward_breakdown.to_dict())
        self.done = r.done
        out = _text(r)
        return out + ("\n" + _EPISODE_OVER if r.done else "")

    def get_reward(self) -> float:
        """The rollout's reward: the sum of its steps' rewards (0.0 when the model called no tool)."""
        return float(sum(self.rewards))

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _text(r: StepResult[Any]) -> str:
    obs = r.observation
    result = getattr(obs, "result", None)
    if result is None:
        return "" if obs is None else str(obs)
    text = result.text
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content)
    return str(text)


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method named like the tool, with a signature and a Google-style docstring derived
    from its input schema (what transformers' ``get_json_schema`` reads)."""
    name = tool.name
    if not name.isidentifier() or keyword.iskeyword(name) or name in _RESERVED or name.startswith("_"):
        raise ValueError(f"tool {name!r} cannot be a TRL environment method (TRL reserves reset/get_reward and _names)")
    schema = tool.input_schema or {}
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    arg_lines = []
    for pname, p in props.items():
        if not pname.isidentifier() or keyword.iskeyword(pname):
            raise ValueError(f"tool {name!r}: argument {pname!r} is not a Python identifier")
        t = _JSON_TYPES.get(p.get("type", ""), dict if p.get("type") == "object" else str)
        default = inspect.Parameter.empty if pname in required else None
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=t))
        annotations[pname] = t if pname in required else t | None
        desc = " ".join(str(p.get("description") or pname).split())
        if "enum" in p:
            desc += f" (choices: {json.dumps(p['enum'])})"
        arg_lines.append(f"    {pname}: {desc}")

    def method(self: ToolRollout, **kwargs: Any) -> str:
        return self._call(name, kwargs)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    summary = " ".join((tool.description or name).split("\n\n")[0].split())
    doc = summary + ("\n\nArgs:\n" + "\n".join(arg_lines) if arg_lines else "")
    method.__doc__ = doc + "\n\nReturns:\n    The tool's result, as text."
    return method


class EnvironmentFactory:
    """What ``GRPOTrainer(environment_factory=...)`` takes: each call makes a new
    :class:`ToolRollout` (TRL pools them, one per concurrent rollout); :meth:`close` ends
    every session opened so far."""

    def __init__(
        self,
        target: str,
        tools: list[Tool],
        *,
        class_name: str,
        task_column: str = "task_id",
        seed_column: str = "seed",
        **client_kwargs: Any,
    ) -> None:
        self.target, self.tools, self.client_kwargs = target, tools, client_kwargs
        self.task_column, self.seed_column = task_column, seed_column
        self._instances: list[ToolRollout] = []
        namespace: dict[str, Any] = {t.name: _tool_method(t) for t in tools}
        namespace["_factory"] = self
        namespace["__doc__"] = f"The tools of the environment at {target} (a TRL environment)."
        self.cls: type[ToolRollout] = type(class_name, (ToolRollout,), namespace)

    def __call__(self) -> ToolRollout:
        return self.cls()

    @property
    def instances(self) -> list[ToolRollout]:
        """Every instance that opened a session, in order."""
        return list(self._instances)

    def close(self) -> None:
        for inst in self._instances:
            inst._close()
        self._instances.clear()


def environment_factory(
    target: str,
    *,
    class_name: str | None = None,
    task_column: str = "task_id",
    seed_column: str = "seed",
    **client_kwargs: Any,
) -> EnvironmentFactory:
    """An ``environment_factory`` for TRL's ``GRPOTrainer`` from the tool environment at
    ``target`` (a ``grpc://`` or ``http(s)://`` URL).

    The tools are read once from the server (``list_tools``): each becomes a method with the
    tool's name, typed arguments and docstring. Every rollout gets its own session; each tool
    call is a step, rewarded by the environment (its ``reward`` or rubric), and ``get_reward``
    returns the rollout's summed reward, logged by TRL as ``rewards/<class_name>/mean``. A
    dataset row's ``task_id`` (RFC 0004) and ``seed`` columns pick the episode. ``client_kwargs``
    go to :class:`openenv.ToolEnvClient` (``options``, ``timeout``, ...).
    """
    with ToolEnvClient(target, **client_kwargs).sync() as probe:
        tools = probe.list_tools()
        info = probe.info
    if not tools:
        raise ValueError(f"the environment at {target} declares no tools: use openenv.trl.rollout_func instead")
    name = class_name or "".join(p.capitalize() for p in ((info.name if info else "") or "env").split("_")) + "Tools"
    return EnvironmentFactory(
        target, tools, class_name=name, task_column=task_column, seed_column=seed_column, **client_kwargs
    )
