"""JSON-RPC 2.0 as OpenEnv's ``/mcp`` speaks it: error codes both ways.

The server side (:mod:`openenv.http.mcp`) answers a protocol error with a JSON-RPC error
whose ``data.status`` names the exact code of the error table; a client reads that back,
and falls back on the JSON-RPC code and message for stock OpenEnv servers.
"""

from __future__ import annotations

from typing import Any

from openenv.errors import (
    EnvError,
    ErrorCode,
    Internal,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unimplemented,
)

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SERVER_ERROR",
    "error",
    "error_from_rpc",
    "error_of",
]

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR, SERVER_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
    -32000,
)

#: The JSON-RPC code each error of the table is answered with (others: INTERNAL_ERROR).
RPC_CODE: dict[ErrorCode, int] = {
    ErrorCode.NOT_FOUND: INVALID_PARAMS,
    ErrorCode.INVALID_ARGUMENT: INVALID_PARAMS,
    ErrorCode.RESOURCE_EXHAUSTED: SERVER_ERROR,
    ErrorCode.UNIMPLEMENTED: INTERNAL_ERROR,
}

_STATUS = {c.name: c for c in ErrorCode}


def error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}}


def error_of(rid: Any, err: EnvError) -> dict[str, Any]:
    """A protocol error as a JSON-RPC error; ``data.status`` names the exact code
    (capacity errors also carry ``active_sessions``/``max_sessions``, as OpenEnv's)."""
    data: dict[str, Any] = {"status": err.code.name}
    if isinstance(err.details, dict) and err.code is ErrorCode.RESOURCE_EXHAUSTED:
        data.update(err.details)
    elif err.details is not None:
        data["details"] = err.details
    message = err.message
    if err.code is ErrorCode.UNIMPLEMENTED:
        message = f"Environment does not support MCP: {message}"  # OpenEnv's wording
    return error(rid, RPC_CODE.get(err.code, INTERNAL_ERROR), message, data)


def error_from_rpc(err: Any) -> EnvError:
    """The exception of a JSON-RPC error object (ours name ``data.status``; stock OpenEnv's
    are read from the code and message)."""
    err = err if isinstance(err, dict) else {}
    message = str(err.get("message", "JSON-RPC error"))
    data = err.get("data")
    if isinstance(data, dict) and data.get("status") in _STATUS:
        details = data.get("details")
        if details is None and data["status"] == "RESOURCE_EXHAUSTED":
            details = {k: data[k] for k in ("active_sessions", "max_sessions") if k in data} or None
        return EnvError.from_code(_STATUS[data["status"]], message, details=details)
    code = err.get("code")
    low = message.lower()
    if "does not support mcp" in low:  # OpenEnv's answer for an environment without tools
        return Unimplemented(message)
    if code == INVALID_PARAMS:
        return (NotFound if "not found" in low or "unknown tool" in low else InvalidArgument)(message)
    if code == METHOD_NOT_FOUND:
        return Unimplemented(message)
    if code == SERVER_ERROR:
        return ResourceExhausted(message, details=data)
    return Internal(message)
