"""An environment as an Inspect AI ``Task`` (the ``inspect`` extra: ``pip install 'protoenv[inspect]'``).

::

    from inspect_ai import eval
    from openenv.evals.inspect import env_task

    eval(env_task("grpc://127.0.0.1:50051", split="test", limit=20), model="openai/gpt-4o-mini")

Each sample is one episode: a task of the environment's split (RFC 0004) or a seed. The
solver opens a session, resets it, gives the reset observation to the model as the user
message and the environment's tools as Inspect tools; every tool call the model makes is a
step of the episode (scored by the environment's reward or rubric), until the episode ends,
the model stops calling tools or ``max_turns`` is reached. The scorer's value is the
episode's return; its metadata holds every step's reward and the last rubric breakdown.
"""

from __future__ import annotations

import json
from typing import Any

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageUser
from inspect_ai.scorer import Score, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import ToolDef, ToolParams

from openenv.client import EnvClient, SyncEnvClient, ToolEnvClient
from openenv.protocol import StepResult
from openenv.runtime.tools import CallToolAction, Tool
from openenv.v1 import environment_pb2

__all__ = ["env_task", "environment_reward", "play_environment"]

_STORE_KEY = "openenv"


def _text(r: StepResult[Any]) -> str:
    result = getattr(r.observation, "result", None)
    if result is None:
        return "" if r.observation is None else str(r.observation)
    return str(result.text or json.dumps(result.structured_content))


def _tool(tool: Tool, episode: dict[str, Any], client: EnvClient) -> ToolDef:
    async def execute(**kwargs: Any) -> str:
        if episode["done"]:
            return "The episode is over."
        r = await client.step(CallToolAction(tool.name, kwargs))
        episode["rewards"].append(r.reward)
        if r.reward_breakdown is not None:
            episode["breakdown"] = r.reward_breakdown.to_dict()
        episode["done"] = r.done
        episode["terminated"], episode["truncated"] = r.terminated, r.truncated
        return _text(r)

    params = ToolParams.model_validate(
        {k: v for k, v in (tool.input_schema or {}).items() if k in ("type", "properties", "required")}
    )
    return ToolDef(execute, name=tool.name, description=tool.description or tool.name, parameters=params)


@solver
def play_environment(target: str, *, max_turns: int = 10, client_kwargs: dict[str, Any] | None = None) -> Any:
    """A solver playing one episode of the tool environment at ``target`` per sample (the
    sample's metadata ``task_id``/``seed`` choose it)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        episode: dict[str, Any] = {"rewards": [], "breakdown": None, "done": False}
        async with ToolEnvClient(target, **(client_kwargs or {})) as client:
            md = state.metadata or {}
            # An evaluation reports what the environment grades: rich feedback where it is offered
            # (RFC 0015; a training loop keeps the strict default).
            offered = client.info.capabilities.feedback_offered if client.info is not None else ()
            options = {"feedback": "rich"} if environment_pb2.FEEDBACK_RICH in offered else None
            r = await client.reset(md.get("seed"), None, options, task_id=md.get("task_id"))
            episode["episode_id"] = r.episode_id
            tools = await client.list_tools()
            state.messages = [ChatMessageUser(content=_text(r))]
            state.tools = [_tool(t, episode, client).as_tool() for t in tools]
            for _ in range(max_turns):
                state = await generate(state, tool_calls="single")
                last = state.messages[-1]
                if episode["done"] or getattr(last, "role", "") == "assistant":
                    break  # the episode ended, or the model answered without a tool call
        state.store.set(_STORE_KEY, episode)
        return state

    return solve


@scorer(metrics=[mean(), stderr()])
def environment_reward() -> Any:
    """The episode's return (the sum of its step rewards), with the rewards and the last
    rubric breakdown in the score's metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        episode = state.store.get(_STORE_KEY) or {"rewards": [], "breakdown": None, "done": False}
        rewards = [0.0 if x is None else float(x) for x in episode["rewards"]]
        breakdown = episode.get("breakdown")
        explanation = f"{len(rewards)} steps, return {sum(rewards):g}" + (
            f"; last breakdown: {json.dumps(breakdown)}" if breakdown else ""
        )
        return Score(
            value=float(sum(rewards)),
            explanation=explanation,
            metadata={
                "rewards": rewards,
                "reward_breakdown": breakdown,
                "terminated": episode.get("terminated", False),
                "truncated": episode.get("truncated", False),
                "episode_id": episode.get("episode_id", ""),
            },
        )

    return score


def env_task(
    target: str,
    *,
    split: str | None = None,
    task_ids: list[str] | None = None,
    seeds: list[int] | None = None,
    limit: int | None = None,
    max_turns: int = 10,
    name: str | None = None,
    client_kwargs: dict[str, Any] | None = None,
) -> Task:
    """An Inspect ``Task`` over the environment at ``target``: one sample per task of
    ``split`` (or of ``task_ids``), or per seed of ``seeds``; ``limit`` keeps the first ones."""
    kwargs = dict(client_kwargs or {})
    with ToolEnvClient(target, **kwargs).sync() as probe:
        sync: SyncEnvClient = probe
        info = sync.info
        if task_ids is None and seeds is None:
            task_ids = [t.id for t in sync.list_tasks(split, limit=limit)]
    samples: list[Sample] = []
    if task_ids is not None:
        for t in task_ids[:limit]:
            samples.append(Sample(input=f"task {t}", id=t, metadata={"task_id": t}))
    for s in (seeds or [])[:limit]:
        samples.append(Sample(input=f"seed {s}", id=f"seed-{s}", metadata={"seed": s}))
    if not samples:
        raise ValueError(f"no samples: the environment at {target} declares no tasks; pass seeds=[...]")
    env_name = (info.name if info else "") or "environment"
    return Task(
        dataset=MemoryDataset(samples, name=env_name),
        solver=play_environment(target, max_turns=max_turns, client_kwargs=kwargs),
        scorer=environment_reward(),
        name=name or env_name,
    )
