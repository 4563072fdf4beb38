"""One model turn as a harness adapter sees it (OpenEnv 0.10's ``openenv.core.llm_client``
types): the text and the tool calls, in OpenAI's chat message shape on demand."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

__all__ = ["LLMResponse", "ToolCall"]


@dataclasses.dataclass
class ToolCall:
    """A tool call the model made: its id, the tool's name and the parsed arguments."""

    id: str
    name: str
    args: dict[str, Any]


@dataclasses.dataclass
class LLMResponse:
    """A model's answer: its text and its tool calls (none: a final answer)."""

    content: str
    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)

    def to_message_dict(self) -> dict[str, Any]:
        """The answer as an OpenAI chat ``assistant`` message (``tool_calls`` with JSON-text
        arguments when there are any)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.args)}}
                for c in self.tool_calls
            ]
        return msg
