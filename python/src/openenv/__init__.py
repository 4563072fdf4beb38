"""openenv: protocol-first agentic RL environments.

Environment authors subclass :class:`Environment` and call :func:`serve`; trainers use
:class:`EnvClient`. The wire contract is ``proto/openenv/v1`` (generated into
``openenv.v1``); errors follow the table in docs/protocol.md (:mod:`openenv.errors`).
"""

from openenv import rubrics  # Rubric, WeightedSum, Sequential, Gate, TrajectoryRubric, LLMJudge, ...
from openenv.client import EnvClient, SyncEnvClient, ToolEnvClient
from openenv.codec import TensorSpec
from openenv.environment import Environment, StepResult
from openenv.errors import (
    Cancelled,
    DeadlineExceeded,
    EnvError,
    ErrorCode,
    FailedPrecondition,
    Internal,
    InvalidAction,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
)
from openenv.server import Server, serve
from openenv.session import PROTOCOL_VERSION, EpisodeStatus, SessionState
from openenv.tools import CallToolAction, CallToolObservation, Tool, ToolResult, tool

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "CallToolAction",
    "CallToolObservation",
    "Cancelled",
    "DeadlineExceeded",
    "EnvClient",
    "EnvError",
    "Environment",
    "EpisodeStatus",
    "ErrorCode",
    "FailedPrecondition",
    "Internal",
    "InvalidAction",
    "InvalidArgument",
    "NotFound",
    "ResourceExhausted",
    "Server",
    "SessionState",
    "StepResult",
    "SyncEnvClient",
    "TensorSpec",
    "Tool",
    "ToolEnvClient",
    "ToolResult",
    "Unavailable",
    "Unimplemented",
    "serve",
    "rubrics",
    "tool",
]
