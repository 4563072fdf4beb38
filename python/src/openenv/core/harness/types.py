"""The session contract a trainer drives (OpenEnv 0.10's ``openenv.core.harness`` names).

A trainer asks a :class:`ResourceSessionFactory` for one isolated session per rollout. Two modes:

* **loop-owning** (black box): the agent runs its own loop; the session is a
  :class:`TrainableSession`: the trainer waits for it (``wait_for_completion``), reads the
  captured turns (``fetch_training_trace``: the model server's token ids and logprobs with a loss
  mask), and asks for the verdict (``verify``);
* **white-box**: a :class:`HarnessAdapter` runs the tool loop and calls the trainer's
  :class:`ModelStep` for every turn, then ``verify``.

``verify`` forwards the reward the environment produced; it never computes one from the
transcript it is given (the transcript is the policy's output, and a policy optimised against
a verdict it can write would learn to write it: docs/rfcs/0015-grading.md).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Protocol, TypedDict, runtime_checkable

from google.protobuf import json_format

from openenv.core.llm_client import LLMResponse
from openenv.harness.trace import UntrainableTrace, validate_training_trace
from openenv.v1 import trace_pb2

__all__ = [
    "RESERVED_TOOL_NAMES",
    "HarnessAdapter",
    "HarnessRolloutResult",
    "HarnessRunLimits",
    "Message",
    "ModelStep",
    "ModelStepResult",
    "ResourceSession",
    "ResourceSessionFactory",
    "RolloutEvent",
    "ToolResult",
    "ToolTraceEntry",
    "TraceEntry",
    "TrainableSession",
    "TrainingTrace",
    "TrainingTurn",
    "VerifyResult",
]

Message = dict[str, Any]
"""An OpenAI chat message."""

RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})
"""Names no session tool may take: they are the session's own controls."""


@dataclasses.dataclass
class ToolResult:
    """What a session's tool returned: its value, whether the episode ended, metadata (the
    step's ``reward``), and an error text when the tool failed."""

    data: Any = None
    done: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str | None = None


@dataclasses.dataclass
class VerifyResult:
    """A rollout's verdict: ``env_reward`` is the environment's own reward (None: unscored,
    never to be read as 0), ``done`` whether the environment ended the episode."""

    env_reward: float | None = None
    done: bool = False
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    artifacts: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RolloutEvent:
    """Something that happened during a rollout (``model_response``, ``tool_call``)."""

    type: str
    payload: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ToolTraceEntry:
    """One tool call a white-box adapter made, with its result."""

    tool_name: str
    arguments: dict[str, Any]
    result: ToolResult


@dataclasses.dataclass
class ModelStepResult:
    """One turn the trainer sampled: the parsed answer and its tokens."""

    response: LLMResponse
    prompt_ids: list[int] = dataclasses.field(default_factory=list)
    completion_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class HarnessRolloutResult:
    """A white-box rollout: the conversation, the tool calls, events and metrics."""

    messages: list[Message] = dataclasses.field(default_factory=list)
    tool_trace: list[ToolTraceEntry] = dataclasses.field(default_factory=list)
    events: list[RolloutEvent] = dataclasses.field(default_factory=list)
    done: bool = False
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    prompt_ids: list[int] = dataclasses.field(default_factory=list)
    completion_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class HarnessRunLimits:
    """Bounds of a white-box rollout: turns, tool calls, and the sampling passed to each turn."""

    max_turns: int = 10
    max_tool_calls_per_turn: int | None = None
    max_total_tool_calls: int | None = None
    sampling: dict[str, Any] = dataclasses.field(default_factory=dict)


class ModelStep(Protocol):
    """The trainer's sampler: one assistant turn for ``messages`` with ``tools``."""

    def __call__(self, messages: list[Message], tools: list[Any], sampling: dict[str, Any]) -> ModelStepResult: ...


class TraceEntry(TypedDict, total=False):
    """One captured model call as a trainer's reward functions and viewers read it: the request
    and response, the engine's prompt ids, the sampled ids and their logprobs, the loss mask over
    prompt and completion, ``reward`` (a mirror of ``verify()``; None is unscored) and metadata
    (``node_id``, task, session)."""

    request: dict[str, Any]
    response: dict[str, Any]
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_tokens: list[str]
    per_token_logps: list[float]
    loss_mask: list[int]
    reward: float | None
    metadata: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class TrainingTurn:
    """One captured model call (RFC 0017's ``TrainingTurn``): ``loss_mask`` covers
    ``prompt_token_ids + completion_token_ids``."""

    node_id: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    per_token_logps: list[float]
    loss_mask: list[int]
    request: dict[str, Any] = dataclasses.field(default_factory=dict)
    response: dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


def _plain(struct: Any) -> dict[str, Any]:
    out = json_format.MessageToDict(struct)
    return out if isinstance(out, dict) else {}


@dataclasses.dataclass(frozen=True)
class TrainingTrace:
    """A loop-owning rollout's validated captures: a view of an RFC 0017
    :class:`openenv.v1.trace_pb2.TrainingTrace` whose tokens are the model server's."""

    turns: list[TrainingTurn]
    reward: float | None = None
    proto: trace_pb2.TrainingTrace | None = None
    schema_version: int = 1

    @classmethod
    def from_proto(cls, trace: trace_pb2.TrainingTrace) -> TrainingTrace:
        """The view of ``trace``, validated; a text-only trace with turns (the server sent no
        token ids) raises :class:`~openenv.harness.UntrainableTrace`: nothing trainable was
        captured, and nothing is filled in."""
        validate_training_trace(trace)
        if trace.turns and trace.token_source != trace_pb2.TOKEN_SOURCE_UPSTREAM:
            raise UntrainableTrace(
                f"episode {trace.episode_id}: the model server returned no token ids (a text-only trace); "
                "serve the policy with a server that returns them (vLLM: return_token_ids)"
            )
        meta = {"episode_id": trace.episode_id, "session_id": trace.session_id, "task_id": trace.task_id}
        turns = [
            TrainingTurn(
                node_id=f"{trace.episode_id}#{t.call_index}",
                prompt_token_ids=list(t.prompt_token_ids),
                completion_token_ids=list(t.completion_token_ids),
                per_token_logps=list(t.per_token_logps),
                loss_mask=list(t.loss_mask),
                request=_plain(t.request),
                response=_plain(t.response),
                metadata={**meta, "call_index": t.call_index, "api": t.api, "sampling": _plain(t.sampling)},
            )
            for t in trace.turns
        ]
        return cls(turns, trace.reward if trace.HasField("reward") else None, trace)

    def to_trace_entries(self) -> list[TraceEntry]:
        """Each turn as a :class:`TraceEntry` (``node_id`` in its metadata, ``reward`` the
        episode's)."""
        return [
            TraceEntry(
                request=t.request,
                response=t.response,
                prompt_token_ids=list(t.prompt_token_ids),
                completion_token_ids=list(t.completion_token_ids),
                per_token_logps=list(t.per_token_logps),
                loss_mask=list(t.loss_mask),
                reward=self.reward,
                metadata={**t.metadata, "node_id": t.node_id},
            )
            for t in self.turns
        ]


@runtime_checkable
class TrainableSession(Protocol):
    """A loop-owning session: wait for the agent, then read its validated captures."""

    def wait_for_completion(self, timeout_s: float | None = ...) -> int: ...

    def fetch_training_trace(self) -> TrainingTrace: ...


class ResourceSession(abc.ABC):
    """One rollout's environment session, as a harness sees it."""

    @abc.abstractmethod
    def initial_messages(self) -> list[Message]:
        """The conversation the agent starts from (the environment's task)."""

    @abc.abstractmethod
    def list_tools(self) -> list[Any]:
        """The session's tools (``name``, ``description``, ``input_schema``)."""

    @abc.abstractmethod
    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call a tool: one step of the environment session."""

    @abc.abstractmethod
    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """The rollout's verdict: the reward the environment produced (``transcript`` may be
        recorded, never scored)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the session (idempotent)."""


class ResourceSessionFactory(abc.ABC):
    """Makes one isolated session per rollout."""

    @abc.abstractmethod
    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> ResourceSession:
        """A new session for ``task`` (a trainer's prompt, or a task id); ``seed`` picks the task
        where the factory has several (every rollout of a GRPO group gets the same seed)."""


class HarnessAdapter(abc.ABC):
    """Drives a rollout in a session."""

    @abc.abstractmethod
    def run_white_box(
        self, model_step: ModelStep, session: ResourceSession, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        """Run the rollout, the trainer sampling every turn through ``model_step``."""

    def run_black_box(self, session: ResourceSession, limits: HarnessRunLimits | None = None) -> HarnessRolloutResult:
        """Run the rollout with the harness's own model (evaluation); not offered by default."""
        raise NotImplementedError(f"{type(self).__name__} runs white-box rollouts only")
