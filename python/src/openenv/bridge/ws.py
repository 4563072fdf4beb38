"""``/ws``: OpenEnv's session protocol over a WebSocket, translated onto a backend session.

One connection is one session, created when the connection is accepted (capacity and
factory failures: one error frame, then close 1000, as OpenEnv). Frames are JSON text,
processed one at a time in arrival order, one reply per request except ``close``.

Beyond OpenEnv (all additive, see docs/bridge.md):

* a frame may carry ``"id"`` (any JSON scalar): the reply carries the same ``"id"`` and
  the extended shape of :mod:`openenv.wire.frames`; ``"timeout_s"`` bounds a step or a
  tool call on the server (``DEADLINE_EXCEEDED``); ``{"type": "openenv.hello"}`` returns
  the session id and the full ``EnvironmentInfo``; ``{"type": "openenv.render"}`` returns
  the environment's picture of its current state (``Environment.render``, as
  :func:`openenv.wire.render.render_to_json` shapes it; ``UNIMPLEMENTED`` without one), what
  the ``/web`` playground draws. Stock clients never send these.
* ``?session_id=`` attaches to a session created with ``openenv/session/create`` on
  ``POST /mcp`` (OpenEnv 0.10's production ``MCPToolClient``); ``?options=<JSON object>``
  and ``?client_name=`` reach the environment factory.
* the session's idle timeout and the server's drain end the connection with an error
  frame then a close, freeing the slot; uvicorn's keepalive pings detect half-open
  sockets, whose disconnect frees the slot too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from openenv.bridge.backend import BackendSession, call_tool_args
from openenv.bridge.limits import PARSED, UNPARSED, bounded_loads
from openenv.bridge.mcp import handle_jsonrpc
from openenv.errors import EnvError, ErrorCode, Internal, InvalidArgument, ResourceExhausted
from openenv.wire import frames
from openenv.wire.jsontext import dumpb, least_size

if TYPE_CHECKING:
    from openenv.bridge.app import BridgeApp

log = logging.getLogger("openenv.bridge")

__all__ = ["serve_ws"]

_ALLOWED_KEYS = frozenset({"type", "data", "id", "timeout_s"})
_REFUSAL_GRACE_S = 5.0  # a refused client's first request still reads the refusal (not a closed socket)


def _extra_keys(frame: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "extra_forbidden", "loc": [k], "msg": "Extra inputs are not permitted", "input": frame[k]}
        for k in frame
        if k not in _ALLOWED_KEYS
    ]


def _timeout(frame: dict[str, Any]) -> float | None:
    t = frame.get("timeout_s")
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
        raise InvalidArgument("timeout_s must be a positive number of seconds")
    return float(t)


def _reset_args(data: Any) -> tuple[int | None, str | None, dict[str, Any]]:
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
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise InvalidArgument(
            "seed must be an integer >= 0",
            details=[
                {
                    "type": "greater_than_equal",
                    "loc": ["data", "seed"],
                    "msg": "Input should be an integer >= 0",
                    "input": seed,
                }
            ],
        )
    if episode_id is not None and not isinstance(episode_id, str):
        raise InvalidArgument("episode_id must be a string")
    return seed, episode_id or None, opts


async def _close(send: Any, code: int = 1000, reason: str = "") -> None:
    try:
        await send({"type": "websocket.close", "code": code, "reason": reason})
    except (OSError, RuntimeError):  # already gone
        pass


async def serve_ws(app: BridgeApp, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Run one ``/ws`` connection to its end."""
    msg = await receive()
    if msg["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    dumps = frames.dumps
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    attach_id = (query.get("session_id") or [""])[0]
    session: BackendSession | None = None
    owned = False
    ended: list[EnvError] = []
    task = asyncio.current_task()

    def terminate(err: EnvError) -> None:
        if not ended:
            ended.append(err)
            if task is not None:
                task.cancel()

    try:
        try:
            if attach_id:
                session = app.registry.attach(attach_id)
            else:
                options: dict[str, Any] = {}
                raw_opts = (query.get("options") or [""])[0]
                if raw_opts:
                    try:
                        options = frames.loads(raw_opts)
                    except ValueError:
                        raise InvalidArgument("the options query parameter is not JSON", fatal=True) from None
                    if not isinstance(options, dict):
                        raise InvalidArgument("the options query parameter must be a JSON object", fatal=True)
                session = await app.backend.open(options, (query.get("client_name") or ["openenv-ws"])[0])
                owned = True
        except EnvError as e:
            await send({"type": "websocket.send", "text": dumps(frames.error_frame(e, at_open=True))})
            # Let a client that sends its first request right away (as OpenEnv's clients do)
            # read the error as that request's reply instead of failing on a closed socket.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(receive(), _REFUSAL_GRACE_S)
            await _close(send, 1000)
            return
        session.on_terminate(terminate)
        scope["openenv.session"] = session  # for the observing middleware (openenv.bridge.observe)
        if await _loop(app, session, receive, send):
            await _close(send, 1000)
    except asyncio.CancelledError:
        if not ended:
            raise
        err = ended[0]
        await send({"type": "websocket.send", "text": dumps(frames.error_frame(err))})
        await _close(send, 1001 if err.code is ErrorCode.UNAVAILABLE else 1000, err.message[:120])
    finally:
        if session is not None:
            session.on_terminate(None)
            if owned:
                await asyncio.shield(session.close())
            else:
                app.registry.detach(attach_id)


async def _loop(app: BridgeApp, session: BackendSession, receive: Any, send: Any) -> bool:
    """Serve frames until the end; True when the server should send the close frame."""
    dumps = frames.dumps
    backend = app.backend
    tool_actions = backend.tool_actions
    limit = app.max_message_bytes
    while True:
        msg = await receive()
        if msg["type"] != "websocket.receive":
            return False  # websocket.disconnect
        try:
            frame = _frame(msg)
        except ValueError as e:
            await send(
                {"type": "websocket.send", "text": dumps(frames.protocol_error(f"Invalid JSON: {e}", "INVALID_JSON"))}
            )
            continue
        del msg  # the request's text goes once parsed (peak memory per message)
        if type(frame) is not dict:
            await send(
                {
                    "type": "websocket.send",
                    "text": dumps(
                        frames.protocol_error(
                            "Invalid message",
                            "VALIDATION_ERROR",
                            errors=[{"type": "model_type", "loc": [], "msg": "Input should be an object"}],
                        )
                    ),
                }
            )
            continue
        rid = frame.get("id")
        typ = frame.get("type")
        try:
            if not frame.keys() <= _ALLOWED_KEYS:
                raise InvalidArgument("Invalid message", details=_extra_keys(frame))
            if typ == "step":
                if "data" not in frame:
                    raise InvalidArgument(
                        "Invalid message", details=[{"type": "missing", "loc": ["data"], "msg": "Field required"}]
                    )
                data = frame["data"]
                kind = data.get("type") if tool_actions and type(data) is dict else None
                if kind == "list_tools":
                    tools = await session.list_tools()
                    obs = {
                        "tools": [
                            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                            for t in tools
                        ]
                    }
                    reply = frames.observation_frame(frames.JsonStep(obs), rid)
                elif kind == "call_tool" and rid is None:
                    reply = await _tool_step(session, data, _timeout(frame))
                else:
                    ts = await session.step(data, _timeout(frame) if "timeout_s" in frame else None)
                    reply = frames.observation_frame(ts, rid)
            elif typ == "reset":
                seed, episode_id, opts = _reset_args(frame.get("data"))
                reply = frames.observation_frame(await session.reset(seed, episode_id, opts), rid)
            elif typ == "state":
                eid, count, status, st = await session.state()
                reply = frames.state_frame(eid, count, status, st, rid)
            elif typ == "close":
                return True
            elif typ == "mcp":
                resp = await handle_jsonrpc(app, frame.get("data"), session=session, timeout=_timeout(frame))
                reply = {"type": "mcp", "data": resp}
                if rid is not None:
                    reply["id"] = rid
            elif typ == "openenv.render":
                reply = {"type": "openenv.render", "data": await session.render()}
                if rid is not None:
                    reply["id"] = rid
            elif typ == "openenv.hello":
                reply = {
                    "type": "openenv.hello",
                    "id": rid,
                    "data": {
                        "session_id": session.id,
                        "protocol_version": app.protocol_version,
                        "info_b64": app.info_b64,
                    },
                }
            else:
                reply = frames.protocol_error(f"Unknown message type: {typ}", "UNKNOWN_TYPE", rid)
        except EnvError as e:
            reply = frames.error_frame(e, rid)
            await send({"type": "websocket.send", "text": dumps(reply)})
            if e.fatal:
                await _close(send, 1000, e.message[:120])
                return False
            continue
        except asyncio.CancelledError:
            raise
        except Exception as e:  # one failed request never ends the connection
            log.warning("bridge request %r failed", typ, exc_info=True)
            reply = frames.error_frame(Internal(f"{type(e).__name__}: {e}"), rid)
        frame = data = None  # the request's and the reply's objects go before the reply's text is sent
        text = _reply_text(reply, rid, typ, limit)
        del reply
        await send({"type": "websocket.send", "text": text})
        del text


def _frame(msg: dict[str, Any]) -> Any:
    """The parsed frame of a ``websocket.receive`` message (parsed by the observing middleware
    when there is one; ValueError when it is not JSON or refused unparsed)."""
    if PARSED in msg:
        return msg.pop(PARSED)
    if UNPARSED in msg:
        raise ValueError(msg[UNPARSED])
    raw = msg.get("text")
    if raw is None:
        raw = msg.get("bytes") or b""
    return bounded_loads(raw)


def _reply_text(reply: Any, rid: Any, typ: Any, limit: int) -> str:
    """The text of a reply: an in-band ``INTERNAL`` error when it cannot be encoded, and a
    non-fatal ``RESOURCE_EXHAUSTED`` one when it is larger than the message limit (the
    request was carried out), as the gRPC listener answers (RFC 0003)."""
    dumps = frames.dumps
    size = least_size(reply, limit)  # a tool's text result is there three times: known before encoding it
    over = f"over {size}"
    if size <= limit:
        try:
            body = dumpb(reply)  # bytes first: an oversized reply is never copied into a str
        except Exception as e:  # an answer that cannot be encoded never ends the connection
            log.warning("bridge reply to %r cannot be encoded", typ, exc_info=True)
            return dumps(frames.error_frame(Internal(f"the answer cannot be encoded: {type(e).__name__}: {e}"), rid))
        if len(body) <= limit:
            return body.decode()
        over = str(len(body))
        del body
    what = typ if isinstance(typ, str) else "request"
    err = ResourceExhausted(
        f"the reply to {what[:40]} ({over} bytes) exceeds the {limit}-byte message limit; the request was carried out"
    )
    return dumps(frames.error_frame(err, rid))


async def _tool_step(session: BackendSession, data: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """A stock client's ``call_tool`` step: tool errors come back as OpenEnv's error
    observation (``{"tool_name", "result": null, "error": {...}}``), not as error frames."""
    try:
        name, _ = call_tool_args(data)
    except EnvError as e:
        return frames.error_frame(e)
    try:
        ts = await session.step(data, timeout)
    except EnvError as e:
        obs = frames.tool_error_observation(name, e)
        if obs is None:
            raise
        return obs
    return frames.observation_frame(ts)
