"""OpenEnv's WebSocket frames, both ways: the one translation of the JSON protocol.

Server side (the bridge writes these on ``/ws``; docs/bridge.md has the exact frames), in one
of two shapes:

* **stock** (what OpenEnv's own clients expect):
  ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d, ...}}``;
  the observation body also carries ``metadata`` (as OpenEnv 0.10.0 does) and ``data``
  gains the additive keys ``metadata``, ``terminated``, ``truncated``, ``episode_id`` and
  ``step_count`` that stock clients ignore.
* **extended**, only in answer to a frame that carried our correlation key ``"id"``
  (which stock clients never send, because OpenEnv's envelope forbids extra keys): the
  same frame plus ``"id"``, with the observation body left exactly as the environment's
  canonical JSON (no metadata folded in), so our client can rebuild the protocol's
  ``TimeStep`` losslessly.

Client side (:class:`FrameTranslator`): a protocol ``SessionRequest`` becomes a frame and
the reply frame becomes the ``SessionResponse`` (errors as ``Status``), for our servers
(extended frames) and for stock OpenEnv servers (what they do not send is approximated).
No I/O here: :mod:`openenv.client.ws` and the certifier's WebSocket transport do the I/O.

Rewards are always numbers (a ``bool`` becomes ``1.0``/``0.0``); errors use the error
table of docs/protocol.md.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from typing import Any, cast

from google.protobuf import json_format

from openenv.errors import (
    DeadlineExceeded,
    EnvError,
    ErrorCode,
    Internal,
    InvalidArgument,
    NotFound,
    Unimplemented,
)
from openenv.json_protocol import jsonrpc
from openenv.json_protocol.jsontext import dumps, loads
from openenv.json_protocol.payloads import CALL_TOOL, LIST_TOOLS, PayloadJson, message_to_json
from openenv.protocol import EpisodeStatus
from openenv.runtime.tools import ToolResult
from openenv.v1 import environment_pb2, payload_pb2, tool_pb2
from openenv.values import from_struct, to_struct, to_value

__all__ = [
    "ALLOWED_KEYS",
    "FROM_WS_CODE",
    "HELLO",
    "WS_CODE",
    "MAX_SEED",
    "MAX_TIMEOUT_S",
    "FrameTranslator",
    "FrameRequest",
    "JsonStep",
    "Outgoing",
    "dumps",
    "error_frame",
    "call_tool_args",
    "error_from_frame",
    "frame_timeout",
    "info_from_stock",
    "json_step",
    "loads",
    "observation_frame",
    "parse_hello",
    "read_frame",
    "reset_args",
    "state_frame",
    "tool_observation",
    "tool_result_from_json",
    "tools_from_json",
    "ws_code",
]

#: The OpenEnv ``WSErrorCode`` sent for each code of the error table (docs/protocol.md §5.2).
WS_CODE: dict[ErrorCode, str] = {
    ErrorCode.INVALID_ARGUMENT: "VALIDATION_ERROR",
    ErrorCode.FAILED_PRECONDITION: "EXECUTION_ERROR",
    ErrorCode.ABORTED: "SESSION_ERROR",
    ErrorCode.RESOURCE_EXHAUSTED: "CAPACITY_REACHED",
    ErrorCode.DEADLINE_EXCEEDED: "EXECUTION_ERROR",
    ErrorCode.NOT_FOUND: "EXECUTION_ERROR",
    ErrorCode.UNIMPLEMENTED: "UNKNOWN_TYPE",
    ErrorCode.INTERNAL: "EXECUTION_ERROR",
    ErrorCode.UNAVAILABLE: "SESSION_ERROR",
    ErrorCode.CANCELLED: "SESSION_ERROR",
    ErrorCode.UNAUTHENTICATED: "SESSION_ERROR",
    ErrorCode.PERMISSION_DENIED: "SESSION_ERROR",
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
    data: dict[str, Any] = {
        "message": err.message,
        "code": ws_code(err, at_open=at_open),
        "status": err.code.name,
        "fatal": bool(err.fatal),
    }
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
    frame: dict[str, Any] = {
        "type": "error",
        "data": {"message": message, "code": code, "status": status.name, "fatal": False, **extra},
    }
    if rid is not None:
        frame["id"] = rid
    return frame


@dataclasses.dataclass(slots=True)
class JsonStep:
    """A time step with the observation as canonical JSON (see :mod:`openenv.http.payloads`).

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
    return {
        "type": "state",
        "id": rid,
        "data": {"episode_id": episode_id, "step_count": step_count, "status": status, "state": state},
    }


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
    return {
        "content": content,
        "structured_content": sc,
        "meta": None,
        "data": data,
        "is_error": bool(result.get("is_error", False)),
    }


def tool_observation(obs: Any) -> Any:
    """A ``CallToolResponse`` / ``ListToolsResponse`` in canonical JSON as OpenEnv's
    ``CallToolObservation`` / ``ListToolsObservation`` body."""
    if not isinstance(obs, dict):
        return obs
    if "tools" in obs:
        return {
            "tools": [
                {
                    "name": t.get("name", ""),
                    "description": t.get("description", ""),
                    "input_schema": t.get("input_schema", {}),
                }
                for t in obs["tools"]
            ]
        }
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
    obs = {
        "tool_name": tool_name,
        "result": None,
        "error": {"error_type": kind, "message": err.message},
        "metadata": {},
    }
    return {
        "type": "observation",
        "data": {
            "observation": obs,
            "reward": None,
            "done": False,
            "terminated": False,
            "truncated": False,
            "metadata": {},
        },
    }


# =========================================================================== server side: requests

#: The keys of a request frame: OpenEnv's ``type`` and ``data``, our ``id`` and ``timeout_s``.
ALLOWED_KEYS = frozenset({"type", "data", "id", "timeout_s"})

#: How the answer to a :class:`FrameRequest` becomes a frame (see :meth:`FrameRequest.shape`).
OBSERVATION, TOOL_STEP, LIST_TOOLS_STEP, STATE, MCP_LIST, MCP_CALL, CLOSE = (
    "observation",
    "tool_step",
    "list_tools_step",
    "state",
    "mcp_list",
    "mcp_call",
    "close",
)
#: Frames with no request kind in the protocol, answered by the server's translator itself.
MCP_OTHER, RENDER, HELLO_SHAPE = "mcp", "openenv.render", "openenv.hello"


@dataclasses.dataclass(slots=True)
class FrameRequest:
    """A ``/ws`` frame read as a protocol request (the server's side of :class:`FrameTranslator`).

    ``request`` has its kind and scalar fields set; ``value`` is what the payload is in JSON
    (a step's action, a reset's options, a tool call's arguments), left for the server to
    decode with its codecs (:class:`openenv.engine.Prepared`) or to pack into ``request``
    (a remote server). ``shape`` says how the answer becomes a frame; frames of the shapes
    :data:`MCP_OTHER`, :data:`RENDER` and :data:`HELLO_SHAPE` have no ``request``.
    """

    typ: Any
    rid: Any
    shape: str
    request: environment_pb2.SessionRequest | None = None
    value: Any = None
    tool_name: str = ""
    rpc_id: Any = None
    data: Any = None


def _extra_keys(frame: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "extra_forbidden", "loc": [k], "msg": "Extra inputs are not permitted", "input": frame[k]}
        for k in frame
        if k not in ALLOWED_KEYS
    ]


MAX_TIMEOUT_S = 315_576_000_000.0
"""The largest timeout a frame may carry: the range of a protobuf ``Duration`` (10,000 years)."""

MAX_SEED = 2**64 - 1
"""The largest seed: the protocol's ``ResetRequest.seed`` is a ``uint64``."""


def frame_timeout(frame: dict[str, Any]) -> float | None:
    """The frame's ``timeout_s`` (InvalidArgument unless a positive number of seconds, at most
    :data:`MAX_TIMEOUT_S`)."""
    t = frame.get("timeout_s")
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= MAX_TIMEOUT_S:
        raise InvalidArgument(f"timeout_s must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}")
    return float(t)


def reset_args(data: Any) -> tuple[int | None, str | None, dict[str, Any]]:
    """(seed, episode_id, options) of a ``reset`` frame's ``data`` (InvalidArgument when malformed)."""
    if data is None:
        return None, None, {}
    if not isinstance(data, dict):
        raise InvalidArgument(
            "reset data must be an object",
            details=[{"type": "dict_type", "loc": ["data"], "msg": "Input should be a valid dictionary"}],
        )
    opts = dict(data)
    seed = opts.pop("seed", None)
    episode_id = opts.pop("episode_id", None)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise InvalidArgument(
            f"seed must be an integer from 0 to {MAX_SEED}",
            details=[
                {
                    "type": "int_type"
                    if isinstance(seed, bool) or not isinstance(seed, int)
                    else ("greater_than_equal" if seed < 0 else "less_than_equal"),
                    "loc": ["data", "seed"],
                    "msg": f"Input should be an integer from 0 to {MAX_SEED}",
                    "input": seed,
                }
            ],
        )
    if episode_id is not None and not isinstance(episode_id, str):
        raise InvalidArgument("episode_id must be a string")
    return seed, episode_id or None, opts


def call_tool_args(data: Any, parse: Callable[[str], Any] = loads) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of OpenEnv's ``{"type": "call_tool", "tool_name", "arguments"}``
    (arguments may arrive as a JSON string, as OpenEnv accepts: read with ``parse``, which
    raises ValueError for what it refuses)."""
    name = data.get("tool_name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument("call_tool needs a non-empty string 'tool_name'")
    args = data.get("arguments") or {}
    if isinstance(args, str):
        try:
            args = parse(args)
        except ValueError as e:
            raise InvalidArgument(f"call_tool 'arguments' is a string that is not JSON ({e})") from None
    if not isinstance(args, dict):
        raise InvalidArgument("call_tool 'arguments' must be an object")
    return name, args


def _with_timeout(duration: Any, timeout: float | None) -> None:
    if timeout is not None:
        duration.FromNanoseconds(int(timeout * 1e9))


def read_frame(frame: dict[str, Any], *, tool_actions: bool, parse: Callable[[str], Any] = loads) -> FrameRequest:
    """The request of a parsed ``/ws`` frame (a JSON object). Raises the error to answer
    instead (:class:`InvalidArgument`: extra keys, no ``data``, a bad ``seed`` or
    ``timeout_s``); an unknown ``type`` is answered ``UNKNOWN_TYPE`` (:func:`protocol_error`)
    by the caller when ``shape`` is ``""``. ``tool_actions``: the environment's actions are
    tool calls, so a step's ``{"type": "call_tool" | "list_tools"}`` is OpenEnv's tool shape;
    ``parse`` reads JSON text nested in a frame (:func:`call_tool_args`)."""
    rid = frame.get("id")
    typ = frame.get("type")
    if not frame.keys() <= ALLOWED_KEYS:
        raise InvalidArgument("Invalid message", details=_extra_keys(frame))
    new = environment_pb2.SessionRequest
    if typ == "step":
        if "data" not in frame:
            raise InvalidArgument(
                "Invalid message", details=[{"type": "missing", "loc": ["data"], "msg": "Field required"}]
            )
        data = frame["data"]
        if tool_actions and type(data) is dict and "type" not in data and "tool_name" in data:
            data = {**data, "type": "call_tool"}  # OpenEnv's CallToolAction: ``type`` defaults to call_tool
        kind = data.get("type") if tool_actions and type(data) is dict else None
        if kind == "list_tools":  # OpenEnv's list_tools step: not counted
            return FrameRequest(typ, rid, LIST_TOOLS_STEP, new(list_tools=tool_pb2.ListToolsRequest()))
        if kind == "call_tool" and rid is None:  # tool errors answer as OpenEnv's error observation
            timeout = frame_timeout(frame)
            name, _ = call_tool_args(data, parse)
            req = new(step=environment_pb2.StepRequest())
            _with_timeout(req.step.timeout, timeout)
            return FrameRequest(typ, rid, TOOL_STEP, req, data, tool_name=name)
        req = new(step=environment_pb2.StepRequest())
        _with_timeout(req.step.timeout, frame_timeout(frame) if "timeout_s" in frame else None)
        return FrameRequest(typ, rid, OBSERVATION, req, data)
    if typ == "reset":
        seed, episode_id, opts = reset_args(frame.get("data"))
        req = new(reset=environment_pb2.ResetRequest(episode_id=episode_id or ""))
        if seed is not None:
            req.reset.seed = seed
        return FrameRequest(typ, rid, OBSERVATION, req, opts)
    if typ == "state":
        return FrameRequest(typ, rid, STATE, new(state=environment_pb2.StateRequest()))
    if typ == "close":
        return FrameRequest(typ, rid, CLOSE, new(close=environment_pb2.CloseRequest()))
    if typ == "mcp":
        timeout = frame_timeout(frame)
        rpc: Any = frame.get("data")
        rpc_id = rpc.get("id") if type(rpc) is dict else None
        method = rpc.get("method") if type(rpc) is dict and rpc.get("jsonrpc") == "2.0" else None
        params = rpc.get("params") if type(rpc) is dict else None
        if params is None:
            params = {}
        if method == "tools/list" and type(params) is dict:
            return FrameRequest(typ, rid, MCP_LIST, new(list_tools=tool_pb2.ListToolsRequest()), rpc_id=rpc_id)
        if method == "tools/call" and type(params) is dict:
            tool, args = params.get("name"), params.get("arguments") or {}
            if tool and isinstance(tool, str) and isinstance(args, dict):
                req = new(call_tool=tool_pb2.CallToolRequest(name=tool))
                _with_timeout(req.call_tool.timeout, timeout)
                return FrameRequest(typ, rid, MCP_CALL, req, args, tool_name=tool, rpc_id=rpc_id)
        # Other methods and malformed requests: answered (or refused) by the JSON-RPC handler.
        return FrameRequest(typ, rid, MCP_OTHER, data=rpc, value=timeout)
    if typ == "openenv.render":
        return FrameRequest(typ, rid, RENDER)
    if typ == "openenv.hello":
        return FrameRequest(typ, rid, HELLO_SHAPE)
    return FrameRequest(typ, rid, "")


def json_step(ts: environment_pb2.TimeStep, observation: PayloadJson, *, tool: bool = False) -> JsonStep:
    """A protocol time step as a :class:`JsonStep` (payloads read with the environment's
    advertised descriptors: what a server that gets protobuf time steps, a remote one, sends)."""
    return JsonStep(
        observation.to_json(ts.observation) if ts.HasField("observation") else None,
        ts.reward if ts.HasField("reward") else None,
        ts.terminated,
        ts.truncated,
        from_struct(ts.metadata),
        ts.episode_id,
        ts.step_count,
        message_to_json(ts.reward_breakdown) if ts.HasField("reward_breakdown") else None,
        tool,
    )


# =========================================================================== client side

HELLO: dict[str, Any] = {"type": "openenv.hello"}
"""The frame our client sends first: our servers answer with the session id and the full
``EnvironmentInfo``; stock OpenEnv servers answer ``UNKNOWN_TYPE``."""

_STATUS = {c.name: c for c in ErrorCode}
_TOOL_ERRORS: dict[str, type[EnvError]] = {
    "tool_not_found": NotFound,
    "invalid_args": InvalidArgument,
    "timeout": DeadlineExceeded,
}


def error_from_frame(data: Any) -> EnvError:
    """The exception of an error frame's ``data`` (ours carry the exact ``status`` and
    ``fatal``; stock ones are read from the ``WSErrorCode``)."""
    data = data if isinstance(data, dict) else {}
    message = str(data.get("message", "error"))
    status = _STATUS.get(str(data.get("status", "")))
    details = data.get("errors") or data.get("details")
    if details is None and "max_sessions" in data:
        details = {k: data[k] for k in ("active_sessions", "max_sessions") if k in data}
    if status is not None:
        return EnvError.from_code(status, message, details=details, fatal=bool(data.get("fatal", False)))
    code, fatal = FROM_WS_CODE.get(str(data.get("code", "")), (ErrorCode.INTERNAL, False))
    if "fatal" in data:
        fatal = bool(data["fatal"])
    return EnvError.from_code(code, f"{message} ({data.get('code', 'UNKNOWN')})", details=details, fatal=fatal)


def parse_hello(reply: dict[str, Any]) -> tuple[str, environment_pb2.EnvironmentInfo] | None:
    """(session id, info) of our servers' answer to :data:`HELLO`; None for a stock
    server's ``UNKNOWN_TYPE``; raises the error of any other error frame (fatal)."""
    typ = reply.get("type")
    if typ == "openenv.hello":
        data = reply.get("data") or {}
        info = environment_pb2.EnvironmentInfo()
        info.ParseFromString(base64.b64decode(data.get("info_b64") or ""))
        return str(data.get("session_id", "")), info
    if typ == "error":
        data = reply.get("data") or {}
        if isinstance(data, dict) and data.get("code") == "UNKNOWN_TYPE":
            return None
        err = error_from_frame(data)
        err.fatal = True
        raise err
    raise InvalidArgument(f"unexpected answer to openenv.hello: {dumps(reply)[:200]}", fatal=True)


def info_from_stock(metadata: Any, schema: Any) -> environment_pb2.EnvironmentInfo:
    """Describe a stock OpenEnv server from its ``/metadata`` and ``/schema`` documents
    (JSON payloads; either document may be missing or malformed)."""
    info = environment_pb2.EnvironmentInfo()
    for part in ("action", "observation", "state"):
        getattr(info, part).kind = payload_pb2.PAYLOAD_KIND_JSON
    if isinstance(metadata, dict):
        info.name = str(metadata.get("name") or "")
        info.description = str(metadata.get("description") or "")
        info.version = str(metadata.get("version") or "")
        rest = {k: v for k, v in metadata.items() if v is not None and k not in ("name", "description", "version")}
        try:
            to_struct(rest, info.metadata)
        except TypeError:
            pass
    if isinstance(schema, dict):
        for part in ("action", "observation", "state"):
            if isinstance(schema.get(part), dict):
                try:
                    to_struct(schema[part], getattr(info, part).json_schema)
                except (TypeError, ValueError):
                    pass
    return info


def tool_result_from_json(obj: Any) -> ToolResult:
    """An MCP ``CallToolResult`` (camelCase, or OpenEnv's snake_case dump) as a ToolResult."""
    if not isinstance(obj, dict):
        text = "" if obj is None else (obj if isinstance(obj, str) else dumps(obj))
        return ToolResult([{"type": "text", "text": text}], None if obj is None else {"result": obj})
    content = []
    for c in obj.get("content") or []:
        if isinstance(c, dict):
            content.append({k: v for k, v in c.items() if v is not None and k not in ("annotations", "meta", "_meta")})
    sc = obj.get("structuredContent", obj.get("structured_content"))
    if sc is not None and not isinstance(sc, dict):
        sc = {"result": sc}
    return ToolResult(content, sc, bool(obj.get("isError", obj.get("is_error", False))))


def tools_from_json(tools: Any) -> tool_pb2.ListToolsResponse:
    """MCP ``Tool`` descriptors (``inputSchema`` or OpenEnv's ``input_schema``) as a
    ``ListToolsResponse``, with their annotations (and the ``openenv/...`` keys of ``_meta``)."""
    out = tool_pb2.ListToolsResponse()
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        pt = out.tools.add(name=str(t.get("name", "")), description=str(t.get("description") or ""))
        to_struct(t.get("inputSchema", t.get("input_schema")) or {"type": "object"}, pt.input_schema)
        osch = t.get("outputSchema", t.get("output_schema"))
        if osch:
            to_struct(osch, pt.output_schema)
        annotations = dict(t["annotations"]) if isinstance(t.get("annotations"), dict) else {}
        meta = t.get("_meta")
        if isinstance(meta, dict):  # this project's annotations, where the MCP SDK puts them
            annotations.update({k: v for k, v in meta.items() if k.startswith("openenv/")})
        if annotations:
            to_struct(annotations, pt.annotations)
    return out


@dataclasses.dataclass(slots=True)
class Outgoing:
    """A request as a frame. ``frame`` is what to send (the transport adds ``"id"`` on an
    extended session); ``reply`` is False when OpenEnv's protocol has no answer (``close``),
    and the transport answers ``CloseResponse`` itself once the frame is written."""

    request: environment_pb2.SessionRequest
    frame: dict[str, Any]
    reply: bool = True
    tool: str = ""  # "call_tool" / "list_tools": a tool-shaped step


class FrameTranslator:
    """Protocol requests <-> OpenEnv frames for one session; no I/O.

    ``extended`` is True against our servers (replies carry everything; frames may carry
    ``"id"`` and ``"timeout_s"``). Against stock servers what they do not send is
    approximated: ``terminated = done``, ``truncated = False``, episode id and step count
    counted here, an empty observation body decodes as no observation.
    """

    def __init__(self, info: environment_pb2.EnvironmentInfo, *, extended: bool) -> None:
        self.info = info
        self.extended = extended
        self._pj: dict[str, PayloadJson] = {}
        self._rpc_ids = 0
        self._episode_id = ""
        self._step_count = 0

    def _payload_json(self, part: str) -> PayloadJson:
        pj = self._pj.get(part)
        if pj is None:
            pj = self._pj[part] = PayloadJson(getattr(self.info, part), self.info)
        return pj

    # ------------------------------------------------------------------ requests

    def encode(self, req: environment_pb2.SessionRequest) -> Outgoing:
        """The frame of ``req``. Raises :class:`Unimplemented` for what OpenEnv's protocol
        cannot carry (vectorised requests, a second handshake, a per-step timeout towards
        a stock server) and :class:`InvalidArgument` for payloads that do not fit."""
        kind = req.WhichOneof("kind")
        if kind == "step":
            st = req.step
            action, tool = self._action(st.action)
            frame: dict[str, Any] = {"type": "step", "data": action}
            if st.HasField("timeout"):
                frame["timeout_s"] = self._timeout(st.timeout.ToNanoseconds() / 1e9, "a per-step timeout")
            return Outgoing(req, frame, tool=tool)
        if kind == "reset":
            r = req.reset
            data: dict[str, Any] = dict(from_struct(r.options))
            if r.HasField("seed"):
                data["seed"] = r.seed
            if r.episode_id:
                data["episode_id"] = r.episode_id
            return Outgoing(req, {"type": "reset", "data": data})
        if kind == "state":
            if req.state.env_id:
                raise Unimplemented("state(env_id) addresses a vectorised session, which needs gRPC")
            return Outgoing(req, {"type": "state"})
        if kind == "list_tools":
            return Outgoing(req, self._rpc("tools/list", {}))
        if kind == "call_tool":
            c = req.call_tool
            frame = self._rpc("tools/call", {"name": c.name, "arguments": from_struct(c.arguments)})
            if c.HasField("timeout"):
                frame["timeout_s"] = self._timeout(c.timeout.ToNanoseconds() / 1e9, "a tool timeout")
            return Outgoing(req, frame)
        if kind == "close":
            return Outgoing(req, {"type": "close"}, reply=False)
        raise Unimplemented(f"{kind or 'a request with no kind'} has no OpenEnv frame (it needs gRPC)")

    def _timeout(self, seconds: float, what: str) -> float:
        if not self.extended:
            raise Unimplemented(f"{what} needs an openenv server; stock OpenEnv servers have none")
        return seconds

    def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._rpc_ids += 1
        return {"type": "mcp", "data": {"jsonrpc": "2.0", "id": self._rpc_ids, "method": method, "params": params}}

    def _action(self, p: payload_pb2.Payload) -> tuple[Any, str]:
        """(JSON action, tool kind: "call_tool", "list_tools" or "")."""
        if p.WhichOneof("kind") == "message":
            name = p.message.type_url.rsplit("/", 1)[-1]
            if name == CALL_TOOL:
                req = tool_pb2.CallToolRequest()
                p.message.Unpack(req)
                return {
                    "type": "call_tool",
                    "tool_name": req.name,
                    "arguments": from_struct(req.arguments),
                }, "call_tool"
            if name == LIST_TOOLS:
                return {"type": "list_tools"}, "list_tools"
        return self._payload_json("action").to_json(p), ""

    # ------------------------------------------------------------------ replies

    def decode(self, out: Outgoing, reply: dict[str, Any]) -> environment_pb2.SessionResponse:
        """The answer to ``out.request`` read from ``reply`` (an error frame or a JSON-RPC
        error becomes the response's ``error``)."""
        req = out.request
        resp = environment_pb2.SessionResponse(request_id=req.request_id)
        try:
            self._decode(out, reply, resp)
        except EnvError as e:
            resp.ClearField("kind")
            e.to_proto(resp.error)
        return resp

    def _decode(self, out: Outgoing, reply: dict[str, Any], resp: environment_pb2.SessionResponse) -> None:
        kind = out.request.WhichOneof("kind")
        if reply.get("type") == "error":
            raise error_from_frame(reply.get("data"))
        data = reply.get("data")
        if kind in ("list_tools", "call_tool"):
            data = data if isinstance(data, dict) else {}
            if data.get("error") is not None:
                raise jsonrpc.error_from_rpc(data["error"])
            result = data.get("result")
            if kind == "list_tools":
                resp.list_tools.CopyFrom(
                    tools_from_json((result or {}).get("tools") if isinstance(result, dict) else None)
                )
            else:
                if isinstance(result, dict) and "tool_name" in result:  # an OpenEnv step-style dump
                    if result.get("error"):
                        e = result["error"]
                        raise _TOOL_ERRORS.get(str(e.get("error_type", "")), Internal)(str(e.get("message", "")))
                    result = result.get("result")
                resp.call_tool.name = out.request.call_tool.name
                tool_result_from_json(result).to_proto(resp.call_tool.result)
            return
        data = data if isinstance(data, dict) else {}
        if kind == "step":
            self._time_step(data, resp.step.time_step, out.tool)
            if not self.extended and out.tool != "list_tools":
                self._step_count += 1
                resp.step.time_step.step_count = self._step_count
        elif kind == "reset":
            self._episode_id, self._step_count = out.request.reset.episode_id, 0
            self._time_step(data, resp.reset.time_step, "")
        elif kind == "state":
            self._state(data, resp.state)
        else:
            raise InvalidArgument(f"no reply is expected to a {kind} request")

    def _time_step(self, data: dict[str, Any], ts: environment_pb2.TimeStep, tool: str) -> None:
        body = data.get("observation")
        reward = data.get("reward")
        if reward is not None:
            ts.reward = float(reward)
        ts.terminated = bool(data.get("terminated", data.get("done", False)))
        ts.truncated = bool(data.get("truncated", False))
        if self.extended:
            meta = data.get("metadata") or {}
            ts.episode_id = str(data.get("episode_id") or "")
            ts.step_count = int(data.get("step_count") or 0)
            if data.get("reward_breakdown") is not None:
                json_format.ParseDict(data["reward_breakdown"], ts.reward_breakdown, ignore_unknown_fields=True)
            if body is not None:
                self._payload_json("observation").from_json(body, ts.observation)
        else:
            meta = data.get("metadata")
            if isinstance(body, dict) and "metadata" in body:
                body = dict(body)
                inner = body.pop("metadata")
                meta = meta or inner
            ts.episode_id, ts.step_count = self._episode_id, self._step_count
            if tool == "call_tool" and isinstance(body, dict) and "tool_name" in body:
                error = body.get("error")
                if error:
                    cls = _TOOL_ERRORS.get(str(error.get("error_type", "")), Internal)
                    raise cls(str(error.get("message", "tool call failed")))
                resp = tool_pb2.CallToolResponse(name=str(body.get("tool_name", "")))
                tool_result_from_json(body.get("result")).to_proto(resp.result)
                ts.observation.message.Pack(resp)
            elif tool == "list_tools" and isinstance(body, dict) and "tools" in body:
                ts.observation.message.Pack(tools_from_json(body["tools"]))
            elif body is not None and body != {}:
                to_value(body, ts.observation.json)
        if meta:
            to_struct(meta, ts.metadata)

    def _state(self, data: dict[str, Any], out: environment_pb2.StateResponse) -> None:
        out.episode_id = str(data.get("episode_id") or "")
        out.step_count = int(data.get("step_count") or 0)
        status = data.get("status")
        if isinstance(status, str) and status in EpisodeStatus.__members__:
            number = int(EpisodeStatus[status])
        else:
            number = int(EpisodeStatus.RUNNING if out.episode_id else EpisodeStatus.NOT_STARTED)
        # The generated stubs type an enum field as its enum class; the field holds the number.
        out.status = cast(environment_pb2.EpisodeStatus, number)
        if self.extended:
            if data.get("state") is not None:
                self._payload_json("state").from_json(data["state"], out.state)
            return
        rest = {k: v for k, v in data.items() if k not in ("episode_id", "step_count", "status")}
        if rest:
            to_value(rest, out.state.json)
