"""An openenv environment as a SkyRL ``skyrl_gym`` text environment.

SkyRL's contract (skyrl-gym >= 0.4, ``skyrl_gym.envs.base_text_env.BaseTextEnv``): the trainer's
generator makes one environment per trajectory with ``skyrl_gym.make(env_class,
env_config=..., extras=row)``, calls ``init(prompt)`` (the chat messages the model starts from),
then ``step(model_text)`` after each generated turn, which returns ``observations`` (messages
appended to the conversation), ``reward``, ``done`` and ``metadata``; ``close()`` ends it.

Here each environment is one session of an openenv server:

* a **text environment** (its actions are strings): the model's turn is the step's action;
* a **tool environment** (``capabilities.tools``: math_env, wordle, coding_env...): the model's
  turn is parsed for tool calls in the Hermes/Qwen form ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>`` (what Qwen's and most open models' chat templates produce); each call is
  one step of the session, in order, and the turn's reward is the sum of its steps' rewards. A
  turn without a tool call is answered with how to call one, a malformed call, an unknown tool
  or arguments the tool's schema refuses with the error (no step, reward 0): the model's to fix.

The rewards are the server's (its ``reward`` or rubric), never computed here; the episode ends
when the server says so or after ``max_turns`` turns.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from openenv.client import EnvClient, SyncEnvClient, ToolEnvClient
from openenv.errors import InvalidArgument, NotFound
from openenv.protocol import StepResult
from openenv.runtime.tools import CallToolAction

__all__ = ["OpenEnvTextEnv", "parse_tool_calls", "register"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
NO_TOOL_CALL = (
    'No tool call found. Call a tool as <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>; '
    "the tools are listed in the prompt."
)


def parse_tool_calls(text: str) -> list[tuple[str, dict[str, Any]] | str]:
    """The tool calls of a model's turn, in order: ``(name, arguments)`` for each well-formed
    ``<tool_call>`` block, or the error text for a malformed one (told to the model, not raised)."""
    calls: list[tuple[str, dict[str, Any]] | str] = []
    for body in _TOOL_CALL.findall(text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError as e:
            calls.append(f"invalid tool call JSON ({e.msg}): {body[:200]}")
            continue
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            calls.append(f'a tool call needs a "name": {body[:200]}')
            continue
        args = call.get("arguments", call.get("parameters", {}))
        if isinstance(args, str):  # some templates emit the arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                args = None
        if not isinstance(args, Mapping):
            calls.append(f"the arguments of {call['name']!r} must be a JSON object")
            continue
        calls.append((str(call["name"]), dict(args)))
    return calls


def _setting(config: Any, key: str, default: Any = None) -> Any:
    """A key of SkyRL's env_config (an OmegaConf DictConfig, a mapping or an object)."""
    if config is None:
        return default
    if isinstance(config, Mapping) or hasattr(config, "get"):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value


@functools.lru_cache(maxsize=64)
def _has_tools(url: str) -> bool:
    """Whether the server at ``url`` is a tool environment (read once per URL and process)."""
    with EnvClient(url).sync() as probe:
        info = probe.info
        return bool(info is not None and info.capabilities.tools)


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


class OpenEnvTextEnv(BaseTextEnv):  # type: ignore[misc]  # skyrl_gym ships no type hints
    """One trajectory's environment: a session of the openenv server (see the module's text).

    ``env_config`` (SkyRL's ``environment.skyrl_gym.<env_class>`` section, or a dict) and
    ``extras`` (the dataset row) may set ``url`` / ``openenv_url`` (required: ``grpc://`` or
    ``http(s)://``), ``max_turns`` (default 8), ``task_id`` and ``seed`` (which episode: a GRPO
    group's rows name the same task), ``mode`` (``"auto"``, ``"text"`` or ``"tools"``) and
    ``client_kwargs`` (for :class:`openenv.EnvClient`). The row's values win over the config's.

    After the episode: ``rewards`` (one per turn), ``tool_calls``, ``breakdowns`` (rubric score
    trees), ``done`` and ``task_id``.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        row = dict(extras or {})

        def pick(key: str, default: Any = None) -> Any:
            value = row.get(key)
            return _setting(env_config, key, default) if value is None else value

        self.url = str(pick("openenv_url") or pick("url") or "")
        if not self.url:
            raise ValueError("OpenEnvTextEnv needs the server's URL: env_config.url or the row's openenv_url")
        self.max_turns = int(pick("max_turns", 8))
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        task = pick("task_id")
        self.task_id: str | None = None if task is None else str(task)
        seed = pick("seed")
        self.seed: int | None = None if seed is None else int(seed)
        mode = str(pick("mode", "auto"))
        if mode not in ("auto", "text", "tools"):
            raise ValueError(f"mode is 'auto', 'text' or 'tools', got {mode!r}")
        self.tools = _has_tools(self.url) if mode == "auto" else mode == "tools"
        self._client_kwargs = dict(pick("client_kwargs", {}) or {})
        self._client: SyncEnvClient | None = None
        self.rewards: list[float] = []
        self.breakdowns: list[dict[str, Any]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.done = False

    def _session(self) -> SyncEnvClient:
        if self._client is None:
            cls = ToolEnvClient if self.tools else EnvClient
            self._client = cls(self.url, **self._client_kwargs).sync().connect()
        return self._client

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset the session on the row's task and seed; the first observation, when there is
        one, is appended to the prompt's last message."""
        first = self._session().reset(self.seed, None, None, task_id=self.task_id)
        self.turns, self.done = 0, False
        self.rewards, self.breakdowns, self.tool_calls = [], [], []
        messages = [dict(m) for m in prompt]
        text = _text(first)
        if text:
            if messages:
                messages[-1]["content"] = f"{messages[-1].get('content') or ''}\n{text}".lstrip("\n")
            else:
                messages = [{"role": "user", "content": text}]
        return messages, {"task_id": self.task_id}

    def _one(self, action: Any) -> tuple[str, float]:
        r = self._session().step(action)
        if r.reward_breakdown is not None:
            self.breakdowns.append(r.reward_breakdown.to_dict())
        self.done = self.done or r.done
        return _text(r), float(r.reward or 0.0)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn (see the module's text)."""
        if self.done:
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata={"error": "the episode is over"}
            )
        self.turns += 1
        reward = 0.0
        if not self.tools:
            text, reward = self._one(action)
            replies = [text]
        else:
            replies = []
            calls = parse_tool_calls(action)
            if not calls:
                replies.append(NO_TOOL_CALL)
            for call in calls:
                if self.done:
                    break
                if isinstance(call, str):
                    replies.append(f"<tool_response>\nerror: {call}\n</tool_response>")
                    continue
                name, args = call
                self.tool_calls.append((name, args))
                try:
                    text, r = self._one(CallToolAction(name, args))
                except (NotFound, InvalidArgument) as e:  # an unknown tool, bad arguments: the model's to fix
                    text, r = f"error: {e}", 0.0
                reward += r
                replies.append(f"<tool_response>\n{text}\n</tool_response>")
        self.rewards.append(reward)
        done = self.done or self.turns >= self.max_turns
        if done:
            self.close()
        observations = [] if done else [{"role": "user", "content": "\n".join(replies)}]
        metadata = {"task_id": self.task_id, "server_done": self.done, "replies": replies}
        self.done = done
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics SkyRL logs: the return, the turns and tool calls made."""
        return {"return": float(sum(self.rewards)), "turns": self.turns, "tool_calls": len(self.tool_calls)}

    def close(self) -> None:
        """Ends the session (SkyRL calls it after the trajectory; calling it twice is harmless)."""
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


def register(env_id: str = "openenv") -> str:
    """Register :class:`OpenEnvTextEnv` with ``skyrl_gym`` as ``env_id`` (idempotent); returns it.
    Dataset rows then name it in ``env_class`` and skyrl-train's generator makes it."""
    import skyrl_gym
    from skyrl_gym.envs.registration import registry

    if env_id not in registry:
        skyrl_gym.register(id=env_id, entry_point="openenv.skyrl.env:OpenEnvTextEnv")
    return env_id
