"""ART (OpenPipe's Agent Reinforcement Trainer): an openenv environment as ART's rollout function.

ART trains from ``Trajectory`` groups that the user's own ``async def rollout(model, scenario)``
produces: it talks to the model being trained through ``model.openai_client()`` (an
OpenAI-compatible endpoint ART serves, vLLM on the GPU) under ``model.get_inference_name()``,
and returns ``art.Trajectory(messages_and_choices=[...], reward=...)``, the model's turns kept
as the ``Choice`` objects the endpoint returned (ART trains on those). :func:`rollout` builds
that function over any openenv server:

* one session per rollout, reset on the scenario's ``task_id`` / ``seed`` (a mapping or an
  object with those attributes);
* a tool environment's tools are offered as OpenAI function tools; each tool call is one step,
  its result a ``tool`` message; a text environment's step is the assistant's text;
* the trajectory's reward is the sum of the server's step rewards (its reward or rubric), its
  metrics the steps and tool calls made; the episode ends when the server says so, when the
  model answers without a tool call (tool environments) or after ``max_turns`` model turns.

``openpipe-art`` is not a dependency: ``art.Trajectory`` is imported when the first trajectory
is made (pass ``trajectory=`` to build something else). Training (``await model.train(groups)``
with ART's LocalBackend: Unsloth and vLLM) needs a GPU and Python 3.12+ for current ART releases;
docs/training.md ("ART") has the recipe.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from openenv.client import EnvClient, ToolEnvClient
from openenv.errors import InvalidArgument, NotFound
from openenv.protocol import StepResult
from openenv.runtime.tools import CallToolAction

__all__ = ["rollout"]


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


def _field(scenario: Any, key: str) -> Any:
    if isinstance(scenario, Mapping):
        return scenario.get(key)
    return getattr(scenario, key, None)


def _art_trajectory(**fields: Any) -> Any:
    import art  # openpipe-art: the trainer's own type

    return art.Trajectory(**fields)


def rollout(
    target: str,
    *,
    max_turns: int = 8,
    system_prompt: str | None = None,
    trajectory: Callable[..., Any] | None = None,
    client_kwargs: Mapping[str, Any] | None = None,
) -> Callable[[Any, Any], Awaitable[Any]]:
    """``async def rollout(model, scenario)`` for ART over the environment at ``target`` (see
    the module's text). ``trajectory`` makes the result from ``messages_and_choices``,
    ``reward``, ``metrics`` and ``metadata`` (default: ``art.Trajectory``)."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    make = trajectory or _art_trajectory

    async def run(model: Any, scenario: Any) -> Any:
        client = model.openai_client()
        name = model.get_inference_name() if hasattr(model, "get_inference_name") else model.name
        task_id, seed = _field(scenario, "task_id"), _field(scenario, "seed")
        async with EnvClient(target, **(client_kwargs or {})) as probe:
            tool_env = bool(probe.info is not None and probe.info.capabilities.tools)
        env: EnvClient = (ToolEnvClient if tool_env else EnvClient)(target, **(client_kwargs or {}))
        total, steps, calls = 0.0, 0, 0
        async with env:
            tools = await env.list_tools() if tool_env else []
            offered = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema or {}},
                }
                for t in tools
            ]
            result = await env.reset(
                None if seed is None else int(seed), task_id=None if task_id is None else str(task_id)
            )
            messages: list[Any] = [{"role": "system", "content": system_prompt}] if system_prompt else []
            messages.append({"role": "user", "content": _text(result)})
            history: list[Any] = list(messages)  # ART's messages_and_choices: the model's turns as Choices
            done = result.done
            for _ in range(max_turns):
                if done:
                    break
                kwargs: dict[str, Any] = {"tools": offered} if offered else {}
                completion = await client.chat.completions.create(model=name, messages=messages, **kwargs)
                choice = completion.choices[0]
                history.append(choice)
                messages.append(choice.message.model_dump(exclude_none=True))
                if not tool_env:
                    r = await env.step(choice.message.content or "")
                    steps += 1
                    total += float(r.reward or 0.0)
                    done = r.done
                    if not done:
                        feedback = {"role": "user", "content": _text(r)}
                        messages.append(feedback)
                        history.append(feedback)
                    continue
                tool_calls = choice.message.tool_calls or []
                if not tool_calls:
                    break  # the model answered without a tool: its rollout is over
                for call in tool_calls:
                    calls += 1
                    try:
                        args = json.loads(call.function.arguments or "{}")
                        r = await env.step(CallToolAction(call.function.name, args if isinstance(args, dict) else {}))
                        text = _text(r)
                        steps += 1
                        total += float(r.reward or 0.0)
                        done = done or r.done
                    except (ValueError, NotFound, InvalidArgument) as e:  # the model's to fix
                        text = f"error: {e}"
                    reply = {"role": "tool", "tool_call_id": call.id, "content": text}
                    messages.append(reply)
                    history.append(reply)
                    if done:
                        break
        return make(
            messages_and_choices=history,
            reward=total,
            metrics={"steps": steps, "tool_calls": calls, "done": float(done)},
            metadata={"task_id": None if task_id is None else str(task_id)},
        )

    return run
