"""A model for Inspect AI's command line that needs no network: ``--model openenv/scripted``.

Registered with Inspect through the ``inspect_ai`` entry point of ``protoenv`` (so
``inspect eval`` finds it by name). It checks an eval's wiring offline — the task file, the
environment server, the tools, the scorer — where Inspect's own ``mockllm/model`` cannot: without
usage figures it counts tokens with tiktoken, whose encoding is downloaded on first use.

::

    inspect eval math_task.py --model openenv/scripted -M tool=submit_answer -M 'arguments={"answer": "42"}'

On its first turn the model calls ``tool`` (``-M tool=NAME``, one of the tools the environment
offers) with ``arguments`` (``-M arguments=JSON``, default ``{}``); on every later turn, or
without ``tool``, it answers ``text`` (``-M text=...``, default ``done``), which ends the
episode for :func:`openenv.evals.inspect.play_environment`. Usage is counted in words, so no
tokenizer is needed.
"""

from __future__ import annotations

import json
from typing import Any

from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, ModelOutput, ModelUsage, modelapi
from inspect_ai.tool import ToolChoice, ToolInfo

__all__ = ["ScriptedModel"]


class ScriptedModel(ModelAPI):
    """``openenv/scripted``: one scripted tool call, then a text answer (see the module)."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008 (Inspect's signature)
        tool: str | None = None,
        arguments: str | dict[str, Any] | None = None,
        text: str = "done",
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        if model_name != "scripted":
            raise ValueError(f"the openenv model API has one model, openenv/scripted (not openenv/{model_name})")
        if model_args:
            raise ValueError(f"openenv/scripted takes tool, arguments and text; not {sorted(model_args)}")
        self.tool = tool
        self.arguments = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        if not isinstance(self.arguments, dict):
            raise ValueError(f"openenv/scripted: arguments must be a JSON object, not {arguments!r}")
        self.text = text

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        called = any(getattr(m, "role", "") == "tool" for m in input)
        if self.tool and not called:
            names = [t.name for t in tools]
            if self.tool not in names:
                raise ValueError(f"openenv/scripted: no tool {self.tool!r} (the environment offers {names})")
            out = ModelOutput.for_tool_call(f"openenv/{self.model_name}", self.tool, self.arguments)
            produced = len(json.dumps(self.arguments).split()) + 1
        else:
            out = ModelOutput.from_content(f"openenv/{self.model_name}", self.text)
            produced = len(self.text.split())
        consumed = sum(len(m.text.split()) for m in input)
        out.usage = ModelUsage(input_tokens=consumed, output_tokens=produced, total_tokens=consumed + produced)
        return out


@modelapi(name="openenv")
def scripted() -> type[ModelAPI]:
    """The ``openenv/...`` model API of Inspect (``openenv/scripted``)."""
    return ScriptedModel
