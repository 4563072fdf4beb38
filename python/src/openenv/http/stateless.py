"""``POST /reset``, ``POST /step``, ``GET /state``: OpenEnv's stateless HTTP endpoints, on the
protocol engine.

OpenEnv's server answers each of these requests with an environment of its own, built for that
request and closed after it: HTTP keeps no episode between calls (episodes are what ``/ws`` is
for). Scripts use them (curl, notebooks, OpenEnv's HTTP clients, its integration suite), so
every server answers them the same way, with OpenEnv's request and response shapes:

* ``POST /reset`` ``{"seed"?, "episode_id"?, ...options}`` (an empty body is ``{}``): a new
  session, its reset, its close; answered ``{"observation", "reward", "done", ...}``;
* ``POST /step`` ``{"action": {...}, "timeout_s"?, "request_id"?, ...}``: a new session, a
  seedless reset (the protocol refuses a step before reset, where OpenEnv steps a
  never-reset environment), the step (``timeout_s``: the step's timeout), its close;
  answered like ``/reset``; OpenEnv's tool actions (``call_tool``, ``list_tools``) and their
  error observations as on ``/ws``;
* ``GET /state``: a new session's state (before any reset: ``episode_id`` null,
  ``step_count`` 0, ``status`` ``NOT_STARTED``, the environment's state as it is then), then
  its close.

Each call is one protocol session of the server's engine (:class:`~openenv.http.backend.EngineSession`,
the one dispatcher of gRPC, ``/ws`` and ``/mcp``; behind ``openenv bridge``, a session of the
remote): it takes a capacity slot (and counts against its client's limit) for the duration of
the request and no longer, so concurrent callers never share an environment, nothing outlives
the response, and a full server answers 503. Bodies are read within the message limit (413
beyond) and parsed within the JSON bounds of the other endpoints; a malformed body or action is
answered 422 with FastAPI's ``{"detail": [...]}`` list, as OpenEnv answers; every other error
of the protocol's table maps onto one HTTP status (:data:`HTTP_STATUS`), the body
``{"detail": message, "status": <protocol code>, "code": <OpenEnv WSErrorCode>}``. Tools-only
environments (OpenEnv's production mode) have none of the three: 404, and absent from
``/openapi.json``. Tokens and the Origin/Host checks are the HTTP listener's
(:mod:`openenv.http.guard`), as for every route but ``/health``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from openenv.engine import Prepared
from openenv.errors import EnvError, ErrorCode, Internal, ResourceExhausted
from openenv.http.asgi import respond
from openenv.http.backend import spawn
from openenv.http.limits import bounded_loads
from openenv.http.ws import reply_frame
from openenv.json_protocol import frames
from openenv.json_protocol.jsontext import dumpb, least_size
from openenv.protocol import SessionState, StepResult
from openenv.v1 import environment_pb2

if TYPE_CHECKING:
    from openenv.http.backend import Backend, EngineSession
    from openenv.http.context import AppContext

log = logging.getLogger("openenv.http")

__all__ = ["HTTP_STATUS", "PATHS", "serve_stateless"]

PATHS: dict[str, str] = {"/reset": "POST", "/step": "POST", "/state": "GET"}
"""The stateless endpoints and their one method each."""

CLIENT_NAME = "openenv-http"
"""The handshake's client name of a stateless call's session (logs, metrics)."""

HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 422,
    ErrorCode.FAILED_PRECONDITION: 409,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.RESOURCE_EXHAUSTED: 503,
    ErrorCode.ABORTED: 409,
    ErrorCode.UNIMPLEMENTED: 501,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.CANCELLED: 499,
}
"""The HTTP status of each code of the error table (docs/protocol.md §5.2) on these endpoints.
(A reply over the message limit, ``RESOURCE_EXHAUSTED`` after the request was carried out, is
500: retrying cannot help.)"""

MAX_EPISODE_ID = 255
"""OpenEnv's bound on ``episode_id`` (``ResetRequest``) and ``request_id`` (``StepRequest``)."""
MAX_SEED = frames.MAX_SEED
MAX_TIMEOUT_S = frames.MAX_TIMEOUT_S

_MISSING = object()


class _Answer(Exception):
    """An answer decided before any session exists (a refused request)."""

    def __init__(self, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers


def _problem(typ: str, loc: list[Any], msg: str, value: Any = _MISSING, **ctx: Any) -> dict[str, Any]:
    """One entry of FastAPI's 422 ``detail`` list (pydantic's error shape)."""
    d: dict[str, Any] = {"type": typ, "loc": loc, "msg": msg}
    if value is not _MISSING:
        d["input"] = value
    if ctx:
        d["ctx"] = ctx
    return d


def _invalid(*problems: dict[str, Any]) -> _Answer:
    return _Answer(422, {"detail": list(problems)})


def _optional_str(body: dict[str, Any], key: str) -> None:
    v = body.get(key)
    if v is None:
        return
    if not isinstance(v, str):
        raise _invalid(_problem("string_type", ["body", key], "Input should be a valid string", v))
    if len(v) > MAX_EPISODE_ID:
        raise _invalid(
            _problem(
                "string_too_long",
                ["body", key],
                f"String should have at most {MAX_EPISODE_ID} characters",
                v[:MAX_EPISODE_ID] + "...",
                max_length=MAX_EPISODE_ID,
            )
        )


def _reset_body(body: dict[str, Any]) -> dict[str, Any]:
    """The ``reset`` frame data of a ``POST /reset`` body (OpenEnv's ``ResetRequest``: seed,
    episode_id, and any other key an option of the reset)."""
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise _invalid(_problem("int_type", ["body", "seed"], "Input should be a valid integer", seed))
        if seed < 0:
            raise _invalid(
                _problem(
                    "greater_than_equal", ["body", "seed"], "Input should be greater than or equal to 0", seed, ge=0
                )
            )
        if seed > MAX_SEED:
            raise _invalid(
                _problem("less_than_equal", ["body", "seed"], f"Input should be less than or equal to {MAX_SEED}", seed)
            )
    _optional_str(body, "episode_id")
    return body


def _step_frame(body: dict[str, Any]) -> dict[str, Any]:
    """The ``step`` frame of a ``POST /step`` body (OpenEnv's ``StepRequest``: action,
    timeout_s, request_id; other keys, OpenEnv's step keyword arguments, have no counterpart in
    the protocol and are ignored)."""
    if "action" not in body:
        raise _invalid(_problem("missing", ["body", "action"], "Field required", body))
    action = body["action"]
    if type(action) is not dict:
        raise _invalid(_problem("dict_type", ["body", "action"], "Input should be a valid dictionary", action))
    frame: dict[str, Any] = {"type": "step", "data": action}
    t = body.get("timeout_s")
    if t is not None:
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise _invalid(_problem("float_type", ["body", "timeout_s"], "Input should be a valid number", t))
        if not t > 0:
            raise _invalid(_problem("greater_than", ["body", "timeout_s"], "Input should be greater than 0", t, gt=0.0))
        if t > MAX_TIMEOUT_S:
            raise _invalid(
                _problem(
                    "less_than_equal",
                    ["body", "timeout_s"],
                    f"Input should be less than or equal to {MAX_TIMEOUT_S:g}",
                    t,
                    le=MAX_TIMEOUT_S,
                )
            )
        frame["timeout_s"] = t
    _optional_str(body, "request_id")
    return frame


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The request body (None when the client left first); :class:`_Answer` 413 beyond ``limit``."""
    body = bytearray()
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        body += msg.get("body", b"")
        if len(body) > limit:
            raise _Answer(413, {"detail": f"the request body exceeds the {limit}-byte message limit"})
        if not msg.get("more_body"):
            return bytes(body)


def _parse(raw: bytes, path: str) -> dict[str, Any]:
    if not raw.strip():
        if path == "/reset":
            return {}  # OpenEnv's ResetRequest defaults to {}
        raise _invalid(_problem("missing", ["body"], "Field required"))
    try:
        body = bounded_loads(raw)
    except ValueError as e:
        raise _invalid(_problem("json_invalid", ["body", 0], "JSON decode error", {}, error=str(e))) from None
    if type(body) is not dict:
        raise _invalid(
            _problem(
                "model_attributes_type", ["body"], "Input should be a valid dictionary or object to extract fields from"
            )
        )
    return body


def _error(err: EnvError, loc: list[Any]) -> _Answer:
    """The HTTP answer to an error of the protocol's table."""
    status = HTTP_STATUS.get(err.code, 500)
    data = frames.error_frame(err)["data"]
    if err.code is ErrorCode.INVALID_ARGUMENT:
        problems = data.pop("errors", None)
        if not isinstance(problems, list) or not problems:
            problems = [_problem("value_error", loc, err.message)]
        body: dict[str, Any] = {"detail": problems, "message": err.message}
    else:
        body = {"detail": err.message}
    body["status"] = err.code.name
    body["code"] = data["code"]
    for k in ("active_sessions", "max_sessions"):
        if k in data:
            body[k] = data[k]
    headers = None
    if status == 503:
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
    return _Answer(status, body, headers)


def _encoder(backend: Backend) -> Any:
    """The engine's ``encode_result`` for a local engine (time steps and states as the JSON
    the frames carry, no protobuf round trip); a relay's answers are protobuf (read by
    :func:`~openenv.http.ws.reply_frame`)."""

    def encode(result: Any) -> Any:
        if isinstance(result, StepResult):
            return backend.json_step(result)
        if isinstance(result, SessionState):
            return backend.json_state(result)
        return result

    return encode


async def _ask(
    session: EngineSession, fr: frames.FrameRequest, item: Any, backend: Backend, loc: list[Any]
) -> dict[str, Any]:
    """One request of the call's session, answered as its frame's ``data`` (an error answer
    raised as its :class:`_Answer`)."""
    resp, encoded = await session.request(item, _encoder(backend))
    err = EnvError.from_proto(resp.error) if resp.WhichOneof("kind") == "error" else None
    frame = reply_frame(backend, fr, resp, encoded, err)
    if frame.get("type") == "error":
        raise _error(err if err is not None else Internal("the request failed"), loc)
    data: dict[str, Any] = frame["data"]
    return data


def _request_of(fr: frames.FrameRequest) -> environment_pb2.SessionRequest:
    if fr.request is None:  # never: the frames built here all have a request kind
        raise Internal(f"no request for a {fr.typ!r} frame")
    return fr.request


async def _call(app: AppContext, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """Run one stateless call on a session of its own; the answer's body."""
    backend = app.backend
    tool_actions = backend.tool_actions
    if path == "/reset":
        fr = frames.read_frame({"type": "reset", "data": _reset_body(body or {})}, tool_actions=tool_actions)
        item: Any = Prepared(_request_of(fr), fr.value)
        loc: list[Any] = ["body"]
    elif path == "/step":
        fr = frames.read_frame(_step_frame(body or {}), tool_actions=tool_actions, parse=bounded_loads)
        req = _request_of(fr)
        # Decoded before a session exists: an invalid action costs no environment.
        item = req if fr.shape == frames.LIST_TOOLS_STEP else Prepared(req, backend.decode_action(fr.value))
        loc = ["body", "action"]
    else:
        fr = frames.read_frame({"type": "state"}, tool_actions=tool_actions)
        item, loc = _request_of(fr), []
    try:
        session = await backend.open({}, CLIENT_NAME)
    except EnvError as e:
        raise _error(e, []) from None
    close_now = True
    try:
        if path == "/step":  # the protocol has no step before reset: a seedless one first
            reset = frames.read_frame({"type": "reset"}, tool_actions=tool_actions)
            await _ask(session, reset, _request_of(reset), backend, [])
        return await _ask(session, fr, item, backend, loc)
    except _Answer as a:
        if a.body.get("status") == "DEADLINE_EXCEEDED":
            # The step may still run in its worker: answered now, the slot freed when it ends.
            close_now = False
            spawn(session.close())
        raise
    finally:
        if close_now:
            await session.close()  # before the answer: a caller's next request finds the slot free


def _bounded(doc: dict[str, Any], limit: int) -> tuple[int, bytes]:
    """The JSON of an answer, or a 500 ``RESOURCE_EXHAUSTED`` one when it is over ``limit``
    bytes (the request was carried out, as every listener answers such a reply)."""
    size = least_size(doc, limit)
    if size <= limit:
        body = dumpb(doc)
        if len(body) <= limit:
            return 200, body
        size = len(body)
    err = ResourceExhausted(
        f"the reply ({size} bytes or more) exceeds the {limit}-byte message limit; the request was carried out"
    )
    return 500, dumpb({"detail": err.message, "status": err.code.name, "code": "CAPACITY_REACHED"})


async def serve_stateless(app: AppContext, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer one request of :data:`PATHS` (see the module's docstring)."""
    path, method = scope["path"], scope["method"]
    try:
        if app.backend.info.capabilities.tools_only:
            raise _Answer(
                404,
                {
                    "detail": f"{path}: this environment is tools-only (OpenEnv's production mode): "
                    "no /reset, /step or /state; its tools are on /mcp"
                },
            )
        if method != PATHS[path]:
            allow = PATHS[path].encode()
            raise _Answer(
                405, {"detail": "Method Not Allowed"}, [(b"content-type", b"application/json"), (b"allow", allow)]
            )
        body: dict[str, Any] | None = None
        if method == "POST":
            raw = await _read_body(receive, app.max_message_bytes)
            if raw is None:
                return
            body = _parse(raw, path)
            del raw
        try:
            doc = await _call(app, path, body)
        except EnvError as e:  # a malformed request: refused before any session
            raise _error(e, ["body", "action"] if path == "/step" else ["body"]) from None
        body = None
        status, out = _bounded(doc, app.max_message_bytes)
        del doc
        await respond(send, status, out)
    except _Answer as a:
        await respond(send, a.status, dumpb(a.body), a.headers)
    except Exception as e:  # one failed request never takes the listener down
        log.warning("%s %s failed", method, path, exc_info=True)
        err = Internal(f"{type(e).__name__}: {e}")
        await respond(send, 500, dumpb({"detail": err.message, "status": err.code.name, "code": "EXECUTION_ERROR"}))
