"""Agent harnesses against environments, every model call captured (``pip install 'protoenv[harness]'``).

* :class:`CaptureProxy`: an OpenAI-compatible proxy (chat completions and responses, streamed or
  not) that forwards to the real endpoint and records every call, tagged with its episode;
* :func:`run_harness` (``openenv harness run``): mini-swe-agent, Codex CLI, OpenCode or any command solves
  tasks of an environment through the proxy; the environment's reward scores it;
* :class:`Jail`: the bubblewrap jail every agent runs in (its own processes and network, the
  environments' packages, tasks and solutions hidden, a reduced environment);
* the trace format (:mod:`openenv.harness.trace`): :func:`read_trace`, :func:`load_trace`
  (``datasets``), :func:`to_grpo` (the shape of a TRL ``GRPOTrainer`` ``rollout_func``);
* :class:`CollectCapture`: ``openenv collect --export-training``'s model calls through the proxy;
* :class:`ScriptedModel` (``openenv harness scripted-model``): deterministic replies, for tests.

docs/harnesses.md is the guide.
"""

from openenv.harness._asgi import serve_in_thread
from openenv.harness.agents import (
    AGENTS,
    Agent,
    AgentContext,
    AgentLaunch,
    AgentUnavailable,
    ClaudeCodeAgent,
    CodexAgent,
    CommandAgent,
    MiniSweAgent,
    OpenCodeAgent,
    agent_from_spec,
)
from openenv.harness.collect import CollectCapture
from openenv.harness.jail import DEFAULT_JAIL, Jail, JailUnavailable, environment_secrets
from openenv.harness.proxy import CaptureProxy, EpisodeTags
from openenv.harness.runner import run_harness
from openenv.harness.scripted import Script, ScriptedModel, byte_tokens, load_script
from openenv.harness.trace import (
    CALL_COLUMNS,
    EPISODE_COLUMNS,
    TraceWriter,
    UntrainableTrace,
    decode_call,
    export_training,
    load_trace,
    read_trace,
    read_training_traces,
    to_grpo,
    training_traces,
    validate_training_trace,
    write_training_traces,
)

__all__ = [
    "AGENTS",
    "CALL_COLUMNS",
    "DEFAULT_JAIL",
    "EPISODE_COLUMNS",
    "Agent",
    "AgentContext",
    "AgentLaunch",
    "AgentUnavailable",
    "CaptureProxy",
    "CodexAgent",
    "CommandAgent",
    "EpisodeTags",
    "Jail",
    "JailUnavailable",
    "MiniSweAgent",
    "OpenCodeAgent",
    "ClaudeCodeAgent",
    "CollectCapture",
    "Script",
    "ScriptedModel",
    "TraceWriter",
    "UntrainableTrace",
    "agent_from_spec",
    "byte_tokens",
    "decode_call",
    "environment_secrets",
    "export_training",
    "load_script",
    "load_trace",
    "read_trace",
    "read_training_traces",
    "run_harness",
    "serve_in_thread",
    "to_grpo",
    "training_traces",
    "validate_training_trace",
    "write_training_traces",
]
