"""OpenEnv's WebSocket frames: JSON encoding, the error-code mapping and reply shapes.

Everything the bridge writes on ``/ws`` is built here, in one of two shapes:

* **stock** (what OpenEnv's own clients expect; docs/bridge.md has the exact frames):
  ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d, ...}}``;
  the observation body also carries ``metadata`` (as OpenEnv 0.10.0 does) and ``data``
  gains the additive keys ``metadata``, ``terminated``, ``truncated``, ``episode_id`` and
  ``step_count`` that stock clients ignore.
* **extended**, only in answer to a frame that carried our correlation key ``"id"``
  (which stock clients never send, because OpenEnv's envelope forbids extra keys): the
  same frame plus ``"id"``, with the observation body left exactly as the environment's
  canonical JSON (no metadata folded in), so our client can rebuild the protocol's
  ``TimeStep`` losslessly.

Rewards are always numbers (a ``bool`` becomes ``1.0``/``0.0``); errors use the error
table of docs/protocol.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from openenv.errors import EnvError, ErrorCode

__all__ = [
    "WS_CODE",
    "JsonStep",
    "dumps",
    "error_frame",
    "loads",
    "observation_frame",
    "state_frame",
    "tool_observation",
    "ws_code",
]

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        import base64

        return base64.b64encode(bytes(obj)).decode()
    from google.protobuf.message import Message

    if isinstance(obj, Message):
        from google.protobuf import json_format

        return json_format.MessageToDict(obj, preserving_proto_field_name=True)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def dumps(obj: Any) -> str:
    """Compact JSON text (orjson; numpy arrays, dataclasses and pydantic models allowed)."""
    return orjson.dumps(obj, default=_default, option=_OPTS).decode()


loads = orjson.loads
"""Parse JSON text or bytes (``orjson.JSONDecodeError`` is a ``ValueError``)."""

#: The OpenEnv ``WSErrorCode`` sent for each code of the error table (docs/protocol.md §5.2).
WS_CODE: dict[ErrorCode, str] = {
    ErrorCode.INVALID_ARGUMENT: "VALIDATION_ERROR",
    ErrorCode.FAILED_PRECONDITION: "EXECUTION_ERROR",
    ErrorCode.RESOURCE_EXHAUSTED: "CAPACITY_REACHED",
    ErrorCode.DEADLINE_EXCEEDED: "EXECUTION_ERROR",
    ErrorCode.NOT_FOUND: "EXECUTION_ERROR",
    ErrorCode.UNIMPLEMENTED: "UNKNOWN_TYPE",
    ErrorCode.INTERNAL: "EXECUTION_ERROR",
    ErrorCode.UNAVAILABLE: "SESSION_ERROR",
    ErrorCode.CANCELLED: "SESSION_ERROR",
}

#: The reverse, for our client talking to stock OpenEnv servers.
FROM_WS_CODE: dict[str, tuple[ErrorCode, bool]] = {
    "INVALID_JSON": (ErrorCode.INVALID_ARGUMENT, False),
    "VALIDATION_ERROR": (ErrorCode.INVALID_ARGUMENT, False),
    "UNKNOWN_TYPE": (ErrorCode.UNIMPLEMENTED, False),
    "EXECUTION_ERROR": (ErrorCode.INTERNAL, False),
    "CAPACITY_REACHED": (ErrorCode.RESOURCE_EXHAUSTED, True),
    "FACTORY_ERROR": (ErrorCode.INTERNAL, True),
    "SESSION_ERROR": (ErrorCode.UNAVAILABLE, True),
}


def ws_code(err: EnvError, *, at_open: bool = False) -> str:
    """The ``WSErrorCode`` of an error; a failure while creating the session is
    ``FACTORY_ERROR`` for INTERNAL (the factory raised)."""
    if at_open and err.code is ErrorCode.INTERNAL:
        return "FACTORY_ERROR"
    return WS_CODE.get(err.code, "EXECUTION_ERROR")


def error_frame(err: EnvError, rid: Any = None, *, at_open: bool = False) -> dict[str, Any]:
    """``{"type": "error", "data": {"message", "code", ...}}`` for an error of the table.

    ``data`` also carries ``status`` (the protocol code name) and ``fatal``; validation
    errors add ``errors`` (the details list), capacity errors add ``active_sessions`` and
    ``max_sessions`` as OpenEnv does.
    """
    data: dict[str, Any] = {"message": err.message, "code": ws_code(err, at_open=at_open),
                            "status": err.code.name, "fatal": bool(err.fatal)}
    det = err.details
    if isinstance(det, dict):
        if err.code is ErrorCode.RESOURCE_EXHAUSTED:
            data.update({k: det[k] for k in ("active_sessions", "max_sessions") if k in det})
        else:
            data["details"] = det
    elif isinstance(det, list):
        data["errors"] = det
    elif det is not None:
        data["details"] = det
    frame: dict[str, Any] = {"type": "error", "data": data}
    if rid is not None:
        frame["id"] = rid
    return frame


def protocol_error(message: str, code: str, rid: Any = None, **extra: Any) -> dict[str, Any]:
    """An error frame the bridge raises itself (``INVALID_JSON``, ``UNKNOWN_TYPE``, ...)."""
    status = FROM_WS_CODE.get(code, (ErrorCode.INVALID_ARGUMENT, False))[0]
    frame: dict[str, Any] = {"type": "error", "data": {"message": message, "code": code,
                                                       "status": status.name, "fatal": False, **extra}}
    if rid is not None:
        frame["id"] = rid
    return frame


@dataclasses.dataclass(slots=True)
class JsonStep:
    """A time step with the observation as canonical JSON (see :mod:`openenv.bridge.payloads`).

    ``tool`` marks an observation of a tool call (a ``CallToolResponse`` /
    ``ListToolsResponse``), which the stock shape rewrites the way OpenEnv's MCP
    environments answer.
    """

    observation: Any
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    episode_id: str = ""
    step_count: int = 0
    reward_breakdown: Any = None
    tool: bool = False


def _reward(r: Any) -> float | None:
    if r is None or type(r) is float:
        return r
    return float(r)


def observation_frame(ts: JsonStep, rid: Any = None) -> dict[str, Any]:
    """The reply to ``reset``/``step``: stock shape, or extended when ``rid`` is given."""
    obs = ts.observation
    meta = ts.metadata or {}
    if rid is None:
        if ts.tool:
            obs = tool_observation(obs)
        if type(obs) is dict:
            if "metadata" not in obs:
                obs = {**obs, "metadata": meta}
        else:
            obs = {"value": obs, "metadata": meta}
    data: dict[str, Any] = {
        "observation": obs,
        "reward": _reward(ts.reward),
        "done": ts.terminated or ts.truncated,
        "terminated": ts.terminated,
        "truncated": ts.truncated,
        "metadata": meta,
        "episode_id": ts.episode_id,
        "step_count": ts.step_count,
    }
    if ts.reward_breakdown is not None:
        data["reward_breakdown"] = ts.reward_breakdown
    frame: dict[str, Any] = {"type": "observation", "data": data}
    if rid is not None:
        frame["id"] = rid
    return frame


def state_frame(episode_id: str, step_count: int, status: str, state: Any, rid: Any = None) -> dict[str, Any]:
    """The reply to ``state``.

    Stock: OpenEnv's ``State`` shape, ``{"episode_id", "step_count", **env_state}`` (an
    environment state that is not an object goes under ``"state"``), plus ``status``.
    Extended: ``{"episode_id", "step_count", "status", "state"}``.
    """
    if rid is None:
        data: dict[str, Any] = {"episode_id": episode_id or None, "step_count": step_count}
        if type(state) is dict:
            data.update({k: v for k, v in state.items() if k not in data})
        elif state is not None:
            data["state"] = state
        data.setdefault("status", status)
        return {"type": "state", "data": data}
    return {"type": "state", "id": rid,
            "data": {"episode_id": episode_id, "step_count": step_count, "status": status, "state": state}}


# --------------------------------------------------------------------------- tool shapes

def content_to_mcp(block: dict[str, Any]) -> dict[str, Any]:
    """A ``ContentBlock`` in canonical proto JSON (``{"text": {"text": ...}}``) as MCP's
    content block (``{"type": "text", "text": ...}``)."""
    if "type" in block:
        return block
    if "text" in block:
        return {"type": "text", "text": block["text"].get("text", "")}
    for kind in ("image", "audio"):
        if kind in block:
            b = block[kind]
            return {"type": kind, "data": b.get("data", ""), "mimeType": b.get("mime_type", "")}
    if "resource" in block:
        r = block["resource"]
        res = {"uri": r.get("uri", ""), "mimeType": r.get("mime_type", "")}
        if "blob" in r:
            res["blob"] = r["blob"]
        else:
            res["text"] = r.get("text", "")
        return {"type": "resource", "resource": res}
    return {"type": "text", "text": ""}


def _ints(v: Any) -> Any:
    """Integral floats as ints, recursively (a protobuf ``Struct`` stores every number as a
    double; OpenEnv's tool results keep Python ints)."""
    if type(v) is float:
        return int(v) if v.is_integer() and abs(v) <= 2**53 else v
    if type(v) is dict:
        return {k: _ints(x) for k, x in v.items()}
    if type(v) is list:
        return [_ints(x) for x in v]
    return v


def tool_result(result: dict[str, Any] | None) -> dict[str, Any]:
    """A ``ToolResult`` in canonical JSON as OpenEnv's dumped ``CallToolResult``
    (``content``, ``structured_content``, ``meta``, ``data``, ``is_error``)."""
    result = result or {}
    content = [content_to_mcp(c) for c in result.get("content", ())]
    sc = _ints(result.get("structured_content"))
    if sc is None:
        texts = [c.get("text", "") for c in content if c.get("type") == "text"]
        data: Any = "\n".join(texts) if texts else None
    else:
        data = sc["result"] if set(sc) == {"result"} else sc
    return {"content": content, "structured_content": sc, "meta": None, "data": data,
            "is_error": bool(result.get("is_error", False))}


def tool_observation(obs: Any) -> Any:
    """A ``CallToolResponse`` / ``ListToolsResponse`` in canonical JSON as OpenEnv's
    ``CallToolObservation`` / ``ListToolsObservation`` body."""
    if not isinstance(obs, dict):
        return obs
    if "tools" in obs:
        return {"tools": [{"name": t.get("name", ""), "description": t.get("description", ""),
                           "input_schema": t.get("input_schema", {})} for t in obs["tools"]]}
    if not obs:
        return {}
    return {"tool_name": obs.get("name", ""), "result": tool_result(obs.get("result")), "error": None}


_TOOL_ERROR_TYPE = {
    ErrorCode.NOT_FOUND: "tool_not_found",
    ErrorCode.INVALID_ARGUMENT: "invalid_args",
    ErrorCode.DEADLINE_EXCEEDED: "timeout",
}


def tool_error_observation(tool_name: str, err: EnvError) -> dict[str, Any] | None:
    """OpenEnv's error observation for a failed ``call_tool`` step, or None when the
    error has no such shape (it is then sent as an error frame)."""
    kind = _TOOL_ERROR_TYPE.get(err.code)
    if kind is None:
        return None
    obs = {"tool_name": tool_name, "result": None, "error": {"error_type": kind, "message": err.message},
           "metadata": {}}
    return {"type": "observation", "data": {"observation": obs, "reward": None, "done": False,
                                            "terminated": False, "truncated": False, "metadata": {}}}
