"""Policies for ``openenv collect``: ``random``, ``module:callable`` and ``openai:MODEL``.

A policy is called once per step as ``policy(observation, ctx)`` (sync or async) and returns
the action; ``ctx`` is a :class:`PolicyContext` (the environment's info and tools, the episode
and step, a seeded ``random.Random``). Returning :data:`STOP` ends the episode early (the
``openai:`` policy does when the model answers without a tool call).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from openenv.record.rows import dumps
from openenv.runtime.codec import message_class, tensor_from_proto
from openenv.runtime.tools import CallToolAction, CallToolObservation, Tool
from openenv.v1 import environment_pb2, payload_pb2
from openenv.values import from_struct, from_value

__all__ = ["STOP", "OpenAIPolicy", "PolicyContext", "RandomPolicy", "load_policy"]

STOP = object()
"""Returned by a policy to end the episode without another step."""


@dataclasses.dataclass
class PolicyContext:
    """What a policy may know besides the observation."""

    info: environment_pb2.EnvironmentInfo
    tools: list[Tool]
    episode_id: str
    episode_index: int
    step: int
    rng: random.Random
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Free space for a policy's per-episode memory (the ``openai:`` policy keeps its messages here)."""


class RandomPolicy:
    """Uniform over the advertised action examples (``TypeSpec.examples``), or over the box of
    a bounded tensor action; for tool environments, a random example tool call."""

    name = "random"

    def __call__(self, observation: Any, ctx: PolicyContext) -> Any:
        spec = ctx.info.action
        if spec.examples:
            ex = ctx.rng.choice(list(spec.examples))
            return _decode_example(ex, ctx.info)
        if spec.kind == payload_pb2.PAYLOAD_KIND_TENSOR and spec.tensor.HasField("minimum"):
            t = spec.tensor
            shape = [int(d) for d in t.shape]
            gen = np.random.default_rng(ctx.rng.getrandbits(64))
            hi = t.maximum if t.HasField("maximum") else t.minimum + 1.0
            return gen.uniform(t.minimum, hi, size=shape).astype(_np_dtype(t.dtype))
        raise ValueError(
            "the random policy needs action examples (Environment.example_actions) or a bounded tensor action type"
        )


def _np_dtype(d: int) -> Any:
    name = payload_pb2.DType.Name(d).removeprefix("D_TYPE_").lower()
    return np.dtype("bool" if name == "bool" else name)


def _decode_example(ex: payload_pb2.Payload, info: environment_pb2.EnvironmentInfo) -> Any:
    kind = ex.WhichOneof("kind")
    if kind == "json":
        return from_value(ex.json)
    if kind == "tensor":
        return tensor_from_proto(ex.tensor)
    name = ex.message.type_url.rsplit("/", 1)[-1]
    cls = message_class(info.descriptors, name)
    msg = cls()
    ex.message.Unpack(msg)
    if name == "openenv.v1.CallToolRequest":
        return CallToolAction(msg.name, from_struct(msg.arguments))  # type: ignore[attr-defined]
    return msg


def _observation_text(observation: Any) -> str:
    if isinstance(observation, CallToolObservation):
        return observation.result.text if observation.result is not None else ""
    if isinstance(observation, str):
        return observation
    return dumps(observation)


class OpenAIPolicy:
    """A model behind any OpenAI-compatible chat completions endpoint, playing a tool
    environment with function calling: the reset observation is the user message, the tools
    are offered with their schemas, each tool call is a step and its result the tool message.
    An answer without a tool call ends the episode."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None, **create: Any) -> None:
        import openai  # the collect extra

        self.name = f"openai:{model}"
        self.model, self.create_kwargs = model, create
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused")
        self.route: Callable[[str], str] | None = None
        """The base URL of an episode's calls (its id in, a URL out), when they must reach another
        endpoint than ``base_url``: ``openenv collect --export-training`` routes each episode
        through the capture proxy (:class:`openenv.harness.CollectCapture`)."""

    async def __call__(self, observation: Any, ctx: PolicyContext) -> Any:
        if not ctx.tools:
            raise ValueError("the openai: policy plays tool environments (this one declares no tools)")
        msgs = ctx.history
        text = _observation_text(observation)
        if not msgs:
            msgs.append({"role": "user", "content": text})
        else:  # the result of the previous tool call
            msgs.append({"role": "tool", "tool_call_id": msgs[-1]["tool_calls"][0]["id"], "content": text})
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in ctx.tools
        ]
        # messages and tools are plain dicts, as the API takes them
        client: Any = (
            self.client if self.route is None else self.client.with_options(base_url=self.route(ctx.episode_id))
        )
        resp = await client.chat.completions.create(model=self.model, messages=msgs, tools=tools, **self.create_kwargs)
        message = resp.choices[0].message
        calls = [c for c in message.tool_calls or [] if getattr(c, "function", None) is not None]
        if not calls:
            return STOP
        call: Any = calls[0]
        msgs.append(
            {
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                ],
            }
        )
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError:
            arguments = {"_unparsed": call.function.arguments}
        return CallToolAction(call.function.name, arguments)


def load_policy(spec: str, **openai_kwargs: Any) -> Callable[..., Any]:
    """``random``, ``openai:MODEL`` or ``module:callable`` (a callable object or a factory
    class is instantiated when it takes no arguments)."""
    if spec == "random":
        return RandomPolicy()
    if spec.startswith("openai:"):
        return OpenAIPolicy(spec.removeprefix("openai:"), **openai_kwargs)
    if ":" not in spec:
        raise ValueError(f"policy {spec!r}: use random, openai:MODEL or module:callable")
    mod, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        obj = obj()
    if not callable(obj):
        raise ValueError(f"policy {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]
