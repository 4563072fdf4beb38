"""verifiers (Prime Intellect) integration: an openenv server as a verifiers v1 taskset and env.

Runs in verifiers' own interpreter (verifiers pins ``mcp==2.0.0``, the ``http`` extra needs
``mcp>=2.3``): ``tools/verifiers_venv.py`` builds it from the committed lock with this tree's
core. The taskset id is this module's name, so verifiers' CLI finds it::

    vf-eval openenv.verifiers_env --env.taskset.url grpc://127.0.0.1:50051 --env.taskset.split test ...

* :class:`OpenEnvServerTaskset`: one task per task of the server's Task API (``split``,
  ``task_ids``, ``limit``), or one per ``seeds`` entry for an environment without tasks;
* :class:`OpenEnvServerEnv`: each rollout is one session of the server. The player gets the
  observation (and, for a tool environment, the tools with their schemas) and answers with an
  action: a tool environment's as JSON ``{"name": TOOL, "arguments": {...}}`` (fenced or in a
  ``<tool_call>`` block also accepted), a text environment's as its text. Each answer is one
  step; the server's rewards are summed into the trace's ``openenv_reward``, the rubric being
  the server's (nothing is scored here). The exchange ends when the server ends the episode,
  after ``max_steps`` steps, or when the player stops answering.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from openenv.client import EnvClient, ToolEnvClient
from openenv.errors import InvalidArgument, NotFound
from openenv.protocol import StepResult
from openenv.runtime.tools import CallToolAction

__all__ = [
    "OpenEnvServerConfig",
    "OpenEnvServerData",
    "OpenEnvServerEnv",
    "OpenEnvServerEnvConfig",
    "OpenEnvServerTask",
    "OpenEnvServerTaskset",
    "parse_tool_call",
]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_tool_call(reply: str) -> tuple[str, dict[str, Any]]:
    """The tool call of a player's reply: JSON ``{"name": ..., "arguments": {...}}``, bare,
    fenced or in a ``<tool_call>`` block. Raises ``ValueError`` saying what is wrong."""
    text = reply.strip()
    m = _TOOL_CALL.search(text)
    if m:
        text = m.group(1)
    elif text.startswith("```") and text.endswith("```"):
        text = "\n".join(text.splitlines()[1:-1]).strip()
    try:
        call = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the reply is not a JSON tool call ({e.msg})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError('a tool call is {"name": TOOL, "arguments": {...}}')
    args = call.get("arguments", {})
    if not isinstance(args, dict):
        raise ValueError("the arguments must be a JSON object")
    return call["name"], args


def _text(result: StepResult[Any]) -> str:
    obs = result.observation
    tool_result = getattr(obs, "result", None)
    if tool_result is not None:
        text = tool_result.text
        if not text and tool_result.structured_content is not None:
            text = json.dumps(tool_result.structured_content)
        return str(text)
    if obs is None:
        return ""
    return obs if isinstance(obs, str) else json.dumps(obs, default=str)


class OpenEnvServerData(vf.TaskData):  # type: ignore[misc]
    url: str
    task_id: str | None = None
    seed: int | None = None
    max_steps: int = 16


class OpenEnvServerConfig(vf.TasksetConfig):  # type: ignore[misc]
    url: str = ""
    """The openenv server (``grpc://HOST:PORT`` or ``http(s)://``)."""
    split: str | None = None
    """A split of the server's Task API (RFC 0004): one task per task of it."""
    task_ids: list[str] = Field(default_factory=list)
    """These tasks (instead of a split)."""
    seeds: list[int] = Field(default_factory=list)
    """For an environment without tasks: one task per seed."""
    limit: int | None = None
    """At most this many tasks (the first ones)."""
    max_steps: int = 16
    """Steps per rollout before the exchange is cut."""


class OpenEnvServerTask(vf.Task[OpenEnvServerData]):  # type: ignore[misc]
    pass


class OpenEnvServerEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    player: vf.AgentConfig = vf.AgentConfig()


class OpenEnvServerEnv(vf.Env[OpenEnvServerEnvConfig]):  # type: ignore[misc]
    """One rollout, one session of the server (see the module's text)."""

    async def run(self, task: Any, agents: Any) -> None:
        data: OpenEnvServerData = task.data
        async with EnvClient(data.url) as probe:
            tools_env = bool(probe.info is not None and probe.info.capabilities.tools)
        client: EnvClient = (ToolEnvClient if tools_env else EnvClient)(data.url)
        total, steps = 0.0, 0
        async with client:
            tools = await client.list_tools() if tools_env else []
            result = await client.reset(data.seed, task_id=data.task_id)
            schema = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]

            def payload(text: str, error: str | None = None) -> str:
                body: dict[str, Any] = {"observation": text}
                if tools_env:
                    body["tools"] = schema
                    body["answer_with"] = '{"name": TOOL, "arguments": {...}}'
                if error:
                    body["error"] = error
                return json.dumps(body, ensure_ascii=False)

            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(payload(_text(result)))
                while not segment.terminated and not result.done and steps < data.max_steps:
                    reply = (segment.last_reply or "").strip()
                    if not reply:
                        interaction.trace.stop("empty_action")
                        break
                    steps += 1
                    try:
                        action = CallToolAction(*parse_tool_call(reply)) if tools_env else reply
                        result = await client.step(action)
                    except (ValueError, NotFound, InvalidArgument) as e:
                        segment = await interaction.turn(payload("", error=str(e)))
                        continue
                    total += float(result.reward or 0.0)
                    if result.done:
                        break
                    segment = await interaction.turn(payload(_text(result)))
        interaction.trace.record_reward("openenv_reward", total)


class OpenEnvServerTaskset(vf.Taskset[OpenEnvServerTask, OpenEnvServerConfig]):  # type: ignore[misc]
    """The server's tasks (see the module's text)."""

    def load(self) -> Iterator[OpenEnvServerTask]:
        config = self.config
        if not config.url:
            raise ValueError("the openenv taskset needs the server: --env.taskset.url grpc://HOST:PORT")
        rows: list[tuple[str | None, int | None]]
        if config.task_ids:
            rows = [(t, None) for t in config.task_ids]
        elif config.seeds:
            rows = [(None, s) for s in config.seeds]
        else:
            with EnvClient(config.url).sync() as probe:
                rows = [(t.id, None) for t in probe.list_tasks(config.split)]
        if config.limit is not None:
            rows = rows[: config.limit]
        for task_id, seed in rows:
            name = f"{config.url}#{task_id if task_id is not None else f'seed={seed}'}"
            data = OpenEnvServerData(
                name=name, prompt=None, url=config.url, task_id=task_id, seed=seed, max_steps=config.max_steps
            )
            yield OpenEnvServerTask(data, config.task)
