"""The session factories behind the trainer's contract (:mod:`openenv.core.harness.types`).

:class:`HarnessSessionFactory` (loop-owning): each session is one episode of
:func:`openenv.harness.run_harness`: the environment session is opened and reset to the task,
the agent (mini-swe-agent, Codex, OpenCode, any command) runs in its jail against the capture
proxy, which pins the trainer's sampling policy and records every call's token ids and logprobs;
the environment scores the episode. ``fetch_training_trace`` reads the RFC 0017 trace of that
episode; ``verify`` forwards the environment's reward.

:class:`EnvSessionFactory` (white-box): each session is an environment session whose tools a
:class:`MCPHarnessAdapter` calls, the trainer sampling every turn; ``verify`` forwards the sum of
the environment's step rewards.

In both, the verdict is the environment's, computed in its server from the calls the episode
made; the policy reaches the environment only through its tools (and in loop-owning mode only
from inside the jail, where the environment's package, tasks, server and the trace are out of
sight), so nothing it writes can be read as a reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.client import ToolEnvClient
from openenv.core.harness.types import (
    RESERVED_TOOL_NAMES,
    HarnessAdapter,
    HarnessRolloutResult,
    HarnessRunLimits,
    Message,
    ModelStep,
    ResourceSession,
    ResourceSessionFactory,
    RolloutEvent,
    ToolResult,
    ToolTraceEntry,
    TrainingTrace,
    VerifyResult,
)
from openenv.core.llm_client import LLMResponse
from openenv.harness.agents import Agent
from openenv.harness.jail import DEFAULT_JAIL, Jail
from openenv.harness.runner import run_harness
from openenv.harness.trace import read_trace, training_traces
from openenv.runtime.tools import CallToolAction

__all__ = ["EnvSessionFactory", "EnvToolSession", "HarnessSession", "HarnessSessionFactory", "MCPHarnessAdapter"]


def _pick_task(task: Any, seed: int | None, tasks: Sequence[str] | None) -> str | None:
    """A task id: a string task is one; a mapping may name one (``task_id``); else the factory's
    ``tasks[seed % len]`` (every rollout of a group gets the same seed, so the same task)."""
    if isinstance(task, str):
        return task
    if isinstance(task, Mapping) and isinstance(task.get("task_id"), str):
        return str(task["task_id"])
    if tasks:
        return tasks[(seed or 0) % len(tasks)]
    return None


class HarnessSession(ResourceSession):
    """One loop-owning rollout (see the module's text); the episode starts at construction."""

    def __init__(self, factory: HarnessSessionFactory, task_id: str | None, episode_id: str) -> None:
        self.task_id = task_id
        self.episode_id = episode_id
        self._own_dir = factory.out is None
        root = Path(tempfile.mkdtemp(prefix="openenv-rollout-")) if factory.out is None else Path(factory.out)
        self.directory = root if factory.out is None else root / episode_id
        self._factory = factory
        self._row: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[list[dict[str, Any]]] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"harness-session-{episode_id}", daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        f = self._factory
        asyncio.set_event_loop(self._loop)
        try:
            self._task = self._loop.create_task(
                run_harness(
                    f.target,
                    f.agent,
                    [self.task_id],
                    f.model_url,
                    self.directory,
                    model=f.model,
                    time_budget_s=f.time_budget_s,
                    request_tokens=True,
                    upstream_api_key=f.upstream_api_key,
                    client_kwargs=f.client_kwargs,
                    jail=f.jail,
                    sampling=f.sampling,
                )
            )
            self._started.set()
            [self._row] = self._loop.run_until_complete(self._task)
        except BaseException as e:  # noqa: BLE001 - reported by wait_for_completion, in the trainer's thread
            self._error = e
        finally:
            self._started.set()
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
            self._done.set()

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Wait for the episode; return the agent's exit code. Raises ``TimeoutError`` when
        ``timeout_s`` passes first or the agent ran out of its time budget (its captured turns
        are still in :meth:`fetch_training_trace`), ``RuntimeError`` when the episode failed."""
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"episode {self.episode_id} still running after {timeout_s}s")
        if self._error is not None:
            raise RuntimeError(f"episode {self.episode_id} did not run: {self._error!r}") from self._error
        row = self._row or {}
        if row.get("status") == "timeout":
            raise TimeoutError(f"episode {self.episode_id}: the agent ran out of its time budget")
        if row.get("status") == "error":
            raise RuntimeError(f"episode {self.episode_id} failed: {row.get('error')}")
        code = row.get("agent_exit_code")
        return int(code) if code is not None else -1

    def fetch_training_trace(self) -> TrainingTrace:
        """The episode's captures (RFC 0017), validated; ``ValueError``
        (:class:`~openenv.harness.UntrainableTrace`) when the model server sent no token ids."""
        self._done.wait()
        traces = training_traces(self.directory, allow_text=True)
        if len(traces) != 1:
            raise ValueError(f"episode {self.episode_id}: {len(traces)} episodes in its run directory")
        return TrainingTrace.from_proto(traces[0])

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """The environment's reward for the episode (None when it errored). ``transcript`` is
        not read: the reward is the sum of the environment's step rewards, computed by its server."""
        self._done.wait()
        row = self._row or {}
        status = row.get("status")
        reward = None if self._error is not None or status == "error" else float(row.get("reward") or 0.0)
        metrics = {"status": status, "solved": bool(row.get("solved")), "calls": row.get("calls")}
        artifacts = {"directory": str(self.directory), "session_id": row.get("session_id")}
        return VerifyResult(env_reward=reward, done=status == "finished", metrics=metrics, artifacts=artifacts)

    def initial_messages(self) -> list[Message]:
        """The agent's prompt (the environment's task and how to reach its tools), once the
        episode has started."""
        prompts = list(self.directory.glob("workspaces/*/agent/prompt.txt"))
        return [{"role": "user", "content": prompts[0].read_text(encoding="utf-8")}] if prompts else []

    def list_tools(self) -> list[Any]:
        """The agent reaches the environment's tools itself (``envtool``, MCP): none here."""
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Refused: the agent owns the loop; a tool call from outside would be a step the agent
        did not take."""
        raise RuntimeError("a loop-owning session's tools are the agent's own")

    def episode_row(self) -> dict[str, Any] | None:
        """The runner's row of the episode (``episodes.jsonl``), once it ended."""
        return self._row

    def close(self) -> None:
        """Stop the episode if it is still running (the agent's process group is killed) and,
        when the factory has no ``out``, remove its run directory."""
        if self._closed:
            return
        self._closed = True
        if not self._done.is_set() and self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the episode ended
                self._loop.call_soon_threadsafe(self._task.cancel)
        self._done.wait(120)
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


class HarnessSessionFactory(ResourceSessionFactory):
    """Loop-owning sessions: ``agent`` plays a task of the environment at ``target`` through
    the capture proxy in front of ``model_url`` (the policy's OpenAI-compatible server, which
    must return token ids: vLLM's ``return_token_ids``).

    ``sampling``: the trainer's pinned policy (:func:`~openenv.core.harness.capture.upstream.training_sampling`;
    TRL's worker passes it). ``tasks``: the task ids ``create`` picks from by ``seed``.
    ``out``: where each episode's run directory goes (``out/EPISODE_ID``; default: a temporary
    directory, removed at ``close``). ``jail``: as :func:`~openenv.harness.run_harness` (never
    ``None`` for training)."""

    def __init__(
        self,
        target: str,
        agent: Agent,
        model_url: str,
        *,
        model: str = "default",
        sampling: Mapping[str, Any] | None = None,
        tasks: Sequence[str] | None = None,
        out: str | Path | None = None,
        time_budget_s: float = 900.0,
        upstream_api_key: str | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        jail: Jail | None = DEFAULT_JAIL,
    ) -> None:
        self.target, self.agent, self.model_url, self.model = target, agent, model_url, model
        self.sampling = dict(sampling or {})
        self.tasks = list(tasks) if tasks else None
        self.out = out
        self.time_budget_s = time_budget_s
        self.upstream_api_key = upstream_api_key
        self.client_kwargs = dict(client_kwargs or {})
        self.jail = jail

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> HarnessSession:
        """Start an episode (see :class:`HarnessSession`)."""
        return HarnessSession(self, _pick_task(task, seed, self.tasks), episode_id or uuid.uuid4().hex)


def _text(result: Any) -> str:
    content = getattr(result, "content", None) or []
    texts = [str(c.get("text", "")) for c in content if isinstance(c, Mapping) and c.get("type") == "text"]
    if texts:
        return "\n".join(texts)
    data = getattr(result, "data", None)
    return data if isinstance(data, str) else json.dumps(data, default=str)


class EnvToolSession(ResourceSession):
    """A white-box rollout's environment session: reset to the task at construction, each tool
    call one step (counted, rewarded, recorded by the server)."""

    def __init__(self, factory: EnvSessionFactory, task_id: str | None, episode_id: str) -> None:
        self.task_id, self.episode_id = task_id, episode_id
        self._client = ToolEnvClient(factory.target, **factory.client_kwargs).sync()
        self._client.connect()
        self._closed = False
        try:
            first = self._client.reset(None, episode_id, task_id=task_id)
            self._tools = [t for t in self._client.list_tools() if t.name not in RESERVED_TOOL_NAMES]
        except BaseException:
            self.close()
            raise
        result = getattr(first.observation, "result", None)
        self._prompt = _text(result) if result is not None else str(first.observation)
        self._rewards: list[float] = [float(first.reward or 0.0)]
        self._done = first.done
        self._system = factory.system_prompt

    def initial_messages(self) -> list[Message]:
        """The environment's task as the user's message (after the factory's system prompt)."""
        head = [{"role": "system", "content": self._system}] if self._system else []
        return [*head, {"role": "user", "content": self._prompt}]

    def list_tools(self) -> list[Any]:
        """The environment's tools (:class:`openenv.runtime.tools.Tool`)."""
        return list(self._tools)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """One step of the session; a call after the episode ended is an error result, not a step."""
        if name in RESERVED_TOOL_NAMES:
            raise KeyError(f"reserved tool name: {name}")
        if self._done:
            return ToolResult(data="the episode is over", done=True, error="the episode is over")
        r = self._client.step(CallToolAction(name, dict(arguments)))
        self._rewards.append(float(r.reward or 0.0))
        self._done = r.done
        result = getattr(r.observation, "result", None)
        text = _text(result) if result is not None else str(r.observation)
        error = text if result is not None and result.is_error else None
        return ToolResult(data=text, done=r.done, metadata={"reward": r.reward}, error=error)

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """The sum of the environment's step rewards (``transcript`` is not read)."""
        return VerifyResult(env_reward=sum(self._rewards), done=self._done, metrics={"steps": len(self._rewards) - 1})

    def close(self) -> None:
        """End the environment session (idempotent)."""
        if not self._closed:
            self._closed = True
            self._client.close()


class EnvSessionFactory(ResourceSessionFactory):
    """White-box sessions on the environment at ``target`` (``grpc://``, ``http(s)://``);
    ``tasks`` as :class:`HarnessSessionFactory`'s; ``system_prompt`` opens each conversation."""

    def __init__(
        self,
        target: str,
        *,
        tasks: Sequence[str] | None = None,
        system_prompt: str | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.target = target
        self.tasks = list(tasks) if tasks else None
        self.system_prompt = system_prompt
        self.client_kwargs = dict(client_kwargs or {})

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> EnvToolSession:
        """A session reset to the task (see :func:`HarnessSessionFactory.create` for how it is picked)."""
        return EnvToolSession(self, _pick_task(task, seed, self.tasks), episode_id or uuid.uuid4().hex)


def _assistant_message(response: LLMResponse) -> Message:
    """The turn as the next prompt's assistant message, tool-call arguments as a dict: the form
    chat templates render (``tool_call.arguments | tojson``). OpenAI's JSON-text arguments would
    be rendered as a quoted string, so the re-rendered prompt would no longer extend the sampled
    tokens, and the trainer would drop them from training as drifted context."""
    msg = response.to_message_dict()
    for call, out in zip(response.tool_calls, msg.get("tool_calls") or [], strict=True):
        out["function"]["arguments"] = dict(call.args)
    return msg


class MCPHarnessAdapter(HarnessAdapter):
    """A white-box tool loop: sample a turn, call each tool it names, feed the results back as
    ``tool`` messages; stop on a turn without tool calls, when the environment ends the episode,
    or at the limits."""

    def run_white_box(
        self, model_step: ModelStep, session: ResourceSession, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        """Run one rollout in ``session``; the trainer samples each turn through ``model_step``."""
        lim = limits or HarnessRunLimits()
        messages = list(session.initial_messages())
        tools = session.list_tools()
        out = HarnessRolloutResult(messages=list(messages))
        total = 0
        for turn in range(lim.max_turns):
            step = model_step(messages, tools, dict(lim.sampling))
            messages.append(_assistant_message(step.response))
            out.prompt_ids.extend(step.prompt_ids)
            out.completion_ids.extend(step.completion_ids)
            out.logprobs.extend(step.logprobs)
            calls = step.response.tool_calls[: lim.max_tool_calls_per_turn]
            out.events.append(RolloutEvent("model_response", {"turn": turn, "content": step.response.content,
                                                              "tool_calls": [c.name for c in calls]}))  # fmt: skip
            if not calls:
                out.done = True
                break
            for call in calls:
                if lim.max_total_tool_calls is not None and total >= lim.max_total_tool_calls:
                    out.metrics["truncated"] = True
                    out.messages = messages
                    return out
                try:
                    result = session.call_tool(call.name, dict(call.args))
                except (KeyError, ValueError) as e:  # a tool the model made up: an error it can read
                    result = ToolResult(data=str(e), error=str(e))
                total += 1
                out.tool_trace.append(ToolTraceEntry(call.name, dict(call.args), result))
                content = result.data if isinstance(result.data, str) else json.dumps(result.data)
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
                if result.done:
                    out.done = True
                    break
            if out.done:
                break
        out.messages = messages
        out.metrics.setdefault("turns", sum(1 for e in out.events if e.type == "model_response"))
        out.metrics.setdefault("tool_calls", total)
        return out


def episode_rows(directory: str | Path) -> list[dict[str, Any]]:
    """The episode rows of a session factory's ``out`` directory (every episode's run)."""
    rows: list[dict[str, Any]] = []
    for d in sorted(Path(directory).iterdir()):
        if d.is_dir():
            rows += read_trace(d)["episodes"]
    return rows
