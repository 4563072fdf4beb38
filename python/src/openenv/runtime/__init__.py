"""The environment runtime: what runs an environment, whatever the transport.

* :mod:`~openenv.runtime.environment`: :class:`Environment`, the class authors subclass;
* :mod:`~openenv.runtime.codec`: payload codecs (protobuf messages, dataclasses and pydantic
  models, JSON Schema'd values, tensors) and the JSON/``Struct`` helpers;
* :mod:`~openenv.runtime.tools`: ``@tool`` and the MCP-shaped tool types;
* :mod:`~openenv.runtime.rubrics`: reward rubrics and their score trees;
* :mod:`~openenv.runtime.session`: :class:`EnvironmentRuntime` (what is derived once per class),
  :class:`Session` (one instance and its episode state machine) and
  :class:`SessionManager` (capacity, idle reaping, drain);
* :mod:`~openenv.runtime.limits`: :class:`Limits`, the serving limits every listener applies;
* :mod:`~openenv.runtime.vector`: :class:`VectorSession`, N sessions behind one stream.

It imports nothing above it (no transport, no client): the gRPC server, the HTTP side and
any other front end translate their requests into calls on sessions.
"""

from openenv.runtime import betterproto as _betterproto  # noqa: F401  (registers codec_for's betterproto2 codec)
from openenv.runtime import session as _session
from openenv.runtime.codec import Codec, TensorSpec, codec_for
from openenv.runtime.environment import Environment
from openenv.runtime.limits import Limits
from openenv.runtime.session import EnvironmentRuntime, Session, SessionManager
from openenv.runtime.tools import CallToolAction, CallToolObservation, Tool, ToolResult, tool
from openenv.runtime.vector import VectorSession

__all__ = [
    "CallToolAction",
    "CallToolObservation",
    "Codec",
    "Environment",
    "Limits",
    "EnvironmentRuntime",
    "Session",
    "SessionManager",
    "TensorSpec",
    "Tool",
    "ToolResult",
    "VectorSession",
    "codec_for",
    "tool",
]


def __getattr__(name: str) -> object:
    if name == "Runtime":  # the 0.1 name, forwarded (with its warning) by the session module
        return getattr(_session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
