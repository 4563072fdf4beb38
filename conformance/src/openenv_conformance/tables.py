"""The tables the certifier judges by, restated from the documents.

The certifier is an independent oracle: it does not take the error table, the frame shapes
or the codes of OpenEnv's JSON protocol from the implementation it certifies (``openenv.errors``,
``openenv.json_protocol``), where a mistake would be shared by the server and its judge and so go
unseen. Each table below restates one section of ``docs/protocol.md`` or ``docs/bridge.md``;
``conformance/tests/test_tables.py`` compares every one with the implementation's own and with
the contract's data (``proto/tables/*.json``), so a change to either must be made twice, on
purpose.

Only the generated bindings of the contract (``openenv.v1``) are shared: they *are* the
contract.
"""

from __future__ import annotations

import grpc

__all__ = [
    "CLOSE_CODES",
    "ERROR_CODES",
    "ERROR_TYPE",
    "FEATURES",
    "FEEDBACK_LEVELS",
    "FEEDBACK_OPTION",
    "FROM_RPC_CODE",
    "FROM_WS_CODE",
    "GRADING_ANNOTATION",
    "GRADING_KEYS",
    "GRADING_LANGUAGES",
    "HELLO",
    "OBSERVATION_KEYS",
    "REPLY_TYPE",
    "RPC_CODE",
    "RPC_CODES",
    "RPC_METHODS",
    "STATE_KEYS",
    "STOCK_HELLO_CODES",
    "TRANSPORTS",
    "WS_CODE",
    "WS_CODE_AT_OPEN",
    "close_status",
    "rpc_status_name",
]

# =========================================================================== docs/protocol.md

#: docs/protocol.md §5.2 "The error table": every code the protocol answers with, by name,
#: with its number (the number of ``google.rpc.Code``). No other code is ever sent.
ERROR_CODES: dict[str, int] = {
    "CANCELLED": 1,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "UNAUTHENTICATED": 16,
}

#: docs/protocol.md §10 "Features by minor version" (the matrix RFC -> feature -> minor): every
#: feature a binding may declare (``openenv-binding.json``), with the protocol minor it landed in
#: (None: no wire change) and the ``Capabilities`` field that advertises it with the least value
#: that does (``max_num_envs`` 2: a vectorised session of two; a ``Duration`` counts in whole
#: seconds, so 1 is "set and not zero"). None: nothing on the wire says a server offers it.
FEATURES: dict[str, tuple[str | None, str | None, int]] = {
    "core": ("1.0", None, 0),
    "vectorised_sessions": ("1.1", "max_num_envs", 2),
    "hardened_listeners": ("1.2", "handshake_timeout", 1),
    "tasks": ("1.2", "tasks", 1),
    "server_load": ("1.2", "load_reporting", 1),
    "resume": ("1.2", "resume_grace", 1),
    "snapshots": ("1.2", "snapshots", 1),
    "fork": ("1.2", "max_forks", 1),
    "strict_contract": ("1.2", None, 0),
    "pipelined_messages": ("1.3", "pipelined_requests", 1),
    "multi_agent": ("1.4", "multi_agent", 1),
    "description_digest": ("1.4", None, 0),
    "grading": ("1.5", "grades", 1),
    "worlds_that_behave": ("1.6", "seat_events", 1),
    "training_trace": ("1.6", None, 0),
    "sandboxed_code_tools": (None, None, 0),
    "tensor_element_bounds": (None, None, 0),
}

#: docs/protocol.md §7.1 "Environments that grade" (RFC 0015): the tool annotation key of a grading
#: tool, the keys of its object (others are reserved), and the languages ``language`` may name.
#: RFC 0010's ``{"openenv/sandbox": {..., "grades": true}}`` (§6.1) declares a grading tool too.
GRADING_ANNOTATION = "openenv/grading"
GRADING_KEYS = ("argument", "language")
GRADING_LANGUAGES = ("python", "shell", "sql", "text")
#: The reset option choosing an episode's feedback level, and the levels by their option value
#: (weakest first), as ``Capabilities.feedback`` / ``feedback_offered`` name them.
FEEDBACK_OPTION = "feedback"
FEEDBACK_LEVELS: dict[str, str] = {"strict": "FEEDBACK_STRICT", "rich": "FEEDBACK_RICH"}

#: The transports a declaration names, and the certifier's transport kind speaking each.
TRANSPORTS: dict[str, str] = {"grpc": "grpc", "openenv_json": "http", "binary_ws": "binary"}

# =========================================================================== docs/bridge.md

# -- /ws frames (docs/bridge.md "/ws frames", "Beyond OpenEnv")

#: The request frames and the type of their reply; ``close`` has none (the server closes the
#: socket with 1000).
REPLY_TYPE: dict[str, str | None] = {
    "reset": "observation",
    "step": "observation",
    "state": "state",
    "mcp": "mcp",
    "close": None,
}

#: The type of an error frame, the answer to any request that fails.
ERROR_TYPE = "error"

#: Sent first by openenv's clients; an openenv server answers a frame of the same type (the
#: session id and the binary ``EnvironmentInfo``, base64).
HELLO = "openenv.hello"

#: The keys of an observation reply's ``data``: OpenEnv's ``observation``, ``reward`` and
#: ``done``, and the additive ``terminated``, ``truncated``, ``metadata``, ``episode_id`` and
#: ``step_count`` (``reward_breakdown`` too, when the environment has a rubric).
OBSERVATION_KEYS = frozenset(
    {"observation", "reward", "done", "terminated", "truncated", "metadata", "episode_id", "step_count"}
)

#: The keys of a state reply's ``data`` in the extended shape (a frame that carried an ``"id"``).
STATE_KEYS = frozenset({"episode_id", "step_count", "status", "state"})

#: The JSON-RPC methods of ``mcp`` frames for the protocol's tool requests.
RPC_METHODS: dict[str, str] = {"list_tools": "tools/list", "call_tool": "tools/call"}

# -- errors (docs/bridge.md "Errors"; docs/protocol.md §5.2, column "Bridge")

#: The OpenEnv ``WSErrorCode`` an error frame carries (its ``code``) for each code of the
#: error table. None: no frame is ever sent (CANCELLED: the WebSocket is already gone).
WS_CODE: dict[str, str | None] = {
    "INVALID_ARGUMENT": "VALIDATION_ERROR",
    "FAILED_PRECONDITION": "EXECUTION_ERROR",
    "ABORTED": "SESSION_ERROR",
    "RESOURCE_EXHAUSTED": "CAPACITY_REACHED",
    "DEADLINE_EXCEEDED": "EXECUTION_ERROR",
    "NOT_FOUND": "EXECUTION_ERROR",
    "UNIMPLEMENTED": "UNKNOWN_TYPE",
    "INTERNAL": "EXECUTION_ERROR",
    "UNAVAILABLE": "SESSION_ERROR",
    "CANCELLED": None,
    "UNAUTHENTICATED": "SESSION_ERROR",
    "PERMISSION_DENIED": "SESSION_ERROR",
}

#: The ``WSErrorCode`` of INTERNAL while the session is being created (the factory raised).
WS_CODE_AT_OPEN = "FACTORY_ERROR"

#: How an error frame that names no ``status`` (a stock OpenEnv server's) is read: the code of
#: the error table each ``WSErrorCode`` stands for, and whether the session ends with it (the
#: "Fatal" column). ``EXECUTION_ERROR``, shared by four codes, reads as INTERNAL (the
#: environment raised); ``INVALID_JSON`` is the bridge's own answer to a frame that is not JSON
#: (docs/protocol.md §5.2, notes): INVALID_ARGUMENT. Errors keep the connection open, except
#: those of session creation (capacity, factory, drain).
FROM_WS_CODE: dict[str, tuple[str, bool]] = {
    "INVALID_JSON": ("INVALID_ARGUMENT", False),
    "VALIDATION_ERROR": ("INVALID_ARGUMENT", False),
    "UNKNOWN_TYPE": ("UNIMPLEMENTED", False),
    "EXECUTION_ERROR": ("INTERNAL", False),
    "CAPACITY_REACHED": ("RESOURCE_EXHAUSTED", True),
    "FACTORY_ERROR": ("INTERNAL", True),
    "SESSION_ERROR": ("UNAVAILABLE", True),
}

#: The non-fatal error codes with which a stock OpenEnv server answers :data:`HELLO`, a type it
#: does not know: ``UNKNOWN_TYPE`` (docs/bridge.md "Beyond OpenEnv"), or ``VALIDATION_ERROR``
#: from servers that validate the envelope before the type. The session is open all the same.
STOCK_HELLO_CODES = frozenset({"UNKNOWN_TYPE", "VALIDATION_ERROR"})

# -- /mcp: JSON-RPC (docs/bridge.md "/mcp")

#: The JSON-RPC 2.0 error codes OpenEnv's JSON-RPC answers with.
RPC_CODES: dict[str, int] = {
    "PARSE_ERROR": -32700,  # bad JSON
    "INVALID_REQUEST": -32600,  # not a JSON-RPC request
    "METHOD_NOT_FOUND": -32601,  # unknown method
    "INVALID_PARAMS": -32602,  # unknown tool / invalid params
    "INTERNAL_ERROR": -32603,  # no tools / internal
    "SERVER_ERROR": -32000,  # capacity
}

#: The JSON-RPC code a protocol error is answered with (``data.status`` names the protocol
#: code); every code not listed: ``INTERNAL_ERROR``.
RPC_CODE: dict[str, int] = {
    "NOT_FOUND": RPC_CODES["INVALID_PARAMS"],
    "INVALID_ARGUMENT": RPC_CODES["INVALID_PARAMS"],
    "RESOURCE_EXHAUSTED": RPC_CODES["SERVER_ERROR"],
    "UNIMPLEMENTED": RPC_CODES["INTERNAL_ERROR"],
    "INTERNAL": RPC_CODES["INTERNAL_ERROR"],
}

#: How a JSON-RPC error without ``data.status`` (a stock OpenEnv server's) is read: the code
#: of the error table each JSON-RPC code stands for; any other: INTERNAL. Two refinements by
#: message (:func:`rpc_status_name`): INVALID_PARAMS naming an unknown tool is NOT_FOUND, and
#: OpenEnv's "does not support MCP" (an environment without tools) is UNIMPLEMENTED.
FROM_RPC_CODE: dict[int, str] = {
    RPC_CODES["INVALID_PARAMS"]: "INVALID_ARGUMENT",
    RPC_CODES["METHOD_NOT_FOUND"]: "UNIMPLEMENTED",
    RPC_CODES["SERVER_ERROR"]: "RESOURCE_EXHAUSTED",
}


def rpc_status_name(code: object, message: str) -> str:
    """The error-table code name of a JSON-RPC error that names none (:data:`FROM_RPC_CODE`)."""
    low = message.lower()
    if "does not support mcp" in low:
        return "UNIMPLEMENTED"
    if code == RPC_CODES["INVALID_PARAMS"] and ("not found" in low or "unknown tool" in low):
        return "NOT_FOUND"
    return FROM_RPC_CODE.get(code, "INTERNAL") if isinstance(code, int) else "INTERNAL"


# -- WebSocket close codes (docs/bridge.md "/ws frames", "Errors", "Beyond OpenEnv"; RFC 6455)

#: A WebSocket's close code as the status of the session's end: 1000 after ``close`` and after
#: a session-creation failure's error frame (the session ended normally); 1001 at the end of a
#: drain (UNAVAILABLE: retry elsewhere); 1009 a message over the size limit (docs/protocol.md
#: §5.2, RESOURCE_EXHAUSTED); 1011 a server failure; 1006 no close frame at all (the
#: connection was lost). Any other code: UNKNOWN.
CLOSE_CODES: dict[int, grpc.StatusCode] = {
    1000: grpc.StatusCode.OK,
    1001: grpc.StatusCode.UNAVAILABLE,
    1006: grpc.StatusCode.UNAVAILABLE,
    1009: grpc.StatusCode.RESOURCE_EXHAUSTED,
    1011: grpc.StatusCode.INTERNAL,
}


def close_status(code: int) -> grpc.StatusCode:
    """The status of a session whose WebSocket closed with ``code`` (:data:`CLOSE_CODES`)."""
    return CLOSE_CODES.get(code, grpc.StatusCode.UNKNOWN)
