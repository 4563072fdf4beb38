"""openenv: protocol-first agentic RL environments.

Environment authors subclass :class:`Environment` and call :func:`serve` (how it serves:
:class:`ServerSettings`, with :class:`Limits`, :class:`SecuritySettings`, :class:`HttpSettings`); trainers use
:class:`EnvClient` (or :class:`VectorEnvClient`). The wire contract is ``proto/openenv/v1``
(generated into ``openenv.v1``); errors follow the table in docs/protocol.md
(:mod:`openenv.errors`). docs/architecture.md shows the layers:
``protocol``/``errors``/``v1`` <- ``runtime`` <- ``json_protocol`` <- ``server``/``client``/``bridge``
<- ``host`` <- ``deploy`` <- ``cli``.
"""

from typing import TYPE_CHECKING, Any

from openenv import _compat, rubrics  # Rubric, WeightedSum, Sequential, Gate, TrajectoryRubric, LLMJudge, ...
from openenv.errors import (
    Aborted,
    Cancelled,
    ClientTimeout,
    DeadlineExceeded,
    EnvError,
    ErrorCode,
    FailedPrecondition,
    Internal,
    InvalidAction,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from openenv.host import Host, serve
from openenv.protocol import PROTOCOL_VERSION, AgentStep, EpisodeStatus, SeatEvent, SessionState, StepResult
from openenv.runtime.codec import TensorSpec
from openenv.runtime.environment import Environment
from openenv.runtime.grading import Grading, GradingProbe
from openenv.runtime.multiagent import MultiAgentEnvironment, WorldStep
from openenv.runtime.tasks import TaskInfo, TaskSet
from openenv.runtime.tools import CallToolAction, CallToolObservation, Tool, ToolResult, tool
from openenv.server import Server
from openenv.settings import HttpLimits, HttpSettings, Limits, SecuritySettings, ServerSettings

if TYPE_CHECKING:
    from openenv.client import BatchResult, EnvClient, SyncEnvClient, ToolEnvClient, VectorEnvClient

__version__ = "0.2.0"

# The client side is imported on first use: a server process (``openenv serve``) never needs
# it, and its modules (WebSocket, anyio, ...) are memory an idle server would hold for nothing
# (docs/performance.md, idle RSS; python/tests/test_lazy_imports.py guards it).
_CLIENT_NAMES = frozenset({"BatchResult", "EnvClient", "SyncEnvClient", "ToolEnvClient", "VectorEnvClient"})


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        import openenv.client

        value = getattr(openenv.client, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'openenv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _CLIENT_NAMES)


_compat.install()  # the 0.1 module paths, for one minor version

__all__ = [
    "Aborted",
    "AgentStep",
    "PROTOCOL_VERSION",
    "BatchResult",
    "CallToolAction",
    "CallToolObservation",
    "Cancelled",
    "ClientTimeout",
    "DeadlineExceeded",
    "EnvClient",
    "EnvError",
    "Environment",
    "EpisodeStatus",
    "ErrorCode",
    "FailedPrecondition",
    "Grading",
    "GradingProbe",
    "Host",
    "HttpLimits",
    "HttpSettings",
    "Internal",
    "InvalidAction",
    "InvalidArgument",
    "Limits",
    "MultiAgentEnvironment",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "SeatEvent",
    "SecuritySettings",
    "Server",
    "ServerSettings",
    "SessionState",
    "StepResult",
    "SyncEnvClient",
    "TaskInfo",
    "TaskSet",
    "TensorSpec",
    "Tool",
    "ToolEnvClient",
    "ToolResult",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "VectorEnvClient",
    "WorldStep",
    "rubrics",
    "serve",
    "tool",
]
