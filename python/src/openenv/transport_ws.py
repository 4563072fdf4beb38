"""The client's WebSocket transport: :class:`openenv.EnvClient` over OpenEnv's ``/ws``.

``EnvClient("http://host:8000")`` (or ``https://``, ``ws://``, ``wss://``) uses this
transport instead of gRPC. It translates each protocol request (``SessionRequest``) into
OpenEnv's JSON frames and each reply back into a ``SessionResponse``, so everything above
it (typed clients, ``parse_result``, the error classes) works unchanged. It speaks to:

* **our bridge** (``openenv serve``'s HTTP side, ``openenv bridge``): detected by the
  ``openenv.hello`` frame at connect. Frames then carry a correlation ``"id"`` that the
  bridge echoes, so a client-side timeout never shifts later replies (the late reply is
  matched by id and dropped), pipelining works, and time steps arrive complete
  (terminated/truncated, metadata, episode id, step count, reward breakdown);
* **stock OpenEnv servers**: detected by their ``UNKNOWN_TYPE`` answer to the hello.
  Frames carry no id (OpenEnv's envelope forbids extra keys), replies are matched in
  order, and **a client-side timeout drops the connection** (the session ends with a
  fatal ``DEADLINE_EXCEEDED``) so that a late reply can never be taken for the answer
  to a later request (OpenEnv issue #1143). What stock servers do not send is
  approximated: ``terminated = done``, ``truncated = False``, episode id and step count
  counted locally, an empty observation body decodes as no observation.

The session's idle timeout and keepalive apply as on gRPC: ``keepalive_s`` is the
WebSocket ping interval.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from google.protobuf import json_format

from openenv.bridge import frames
from openenv.bridge.payloads import CALL_TOOL, LIST_TOOLS, PayloadJson
from openenv.codec import from_struct, to_struct, to_value
from openenv.errors import (
    DeadlineExceeded,
    EnvError,
    ErrorCode,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
)
from openenv.tools import ToolResult
from openenv.v1 import environment_pb2, payload_pb2, tool_pb2

__all__ = ["WS_SCHEMES", "WsTransport", "split_url"]

WS_SCHEMES = frozenset({"http", "https", "ws", "wss"})


def split_url(base_url: str) -> tuple[str, str]:
    """(WebSocket URL of ``/ws``, HTTP base URL) of an environment URL.

    ``http://h:8000`` -> (``ws://h:8000/ws``, ``http://h:8000``); a path is kept as a
    prefix (``https://h/env`` -> ``wss://h/env/ws``); a URL already ending in ``/ws`` is
    used as is.
    """
    u = urlsplit(base_url)
    scheme = u.scheme.lower()
    if scheme not in WS_SCHEMES or not u.hostname:
        raise ValueError(f"not an http(s):// or ws(s):// URL: {base_url!r}")
    secure = scheme in ("https", "wss")
    path = u.path.rstrip("/")
    if path.endswith("/ws"):
        path = path[:-3]
    ws = urlunsplit(("wss" if secure else "ws", u.netloc, path + "/ws", u.query, ""))
    http = urlunsplit(("https" if secure else "http", u.netloc, path, "", ""))
    return ws, http


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_STATUS = {s.name: s for s in (ErrorCode)}


def _frame_error(data: Any) -> EnvError:
    """The exception of an OpenEnv error frame (ours carry the exact ``status``)."""
    data = data if isinstance(data, dict) else {}
    message = str(data.get("message", "error"))
    status = _STATUS.get(str(data.get("status", "")))
    details = data.get("errors") or data.get("details")
    if details is None and "max_sessions" in data:
        details = {k: data[k] for k in ("active_sessions", "max_sessions") if k in data}
    if status is not None:
        return EnvError.from_code(status, message, details=details, fatal=bool(data.get("fatal", False)))
    code, fatal = frames.FROM_WS_CODE.get(str(data.get("code", "")), (ErrorCode.INTERNAL, False))
    return EnvError.from_code(code, f"{message} ({data.get('code', 'UNKNOWN')})", details=details, fatal=fatal)


def _rpc_error(err: Any) -> EnvError:
    err = err if isinstance(err, dict) else {}
    message = str(err.get("message", "JSON-RPC error"))
    data = err.get("data")
    if isinstance(data, dict) and data.get("status") in _STATUS:
        return EnvError.from_code(_STATUS[data["status"]], message, details=data.get("details"))
    code = err.get("code")
    low = message.lower()
    if code == -32602:
        return (NotFound if "not found" in low or "unknown tool" in low else InvalidArgument)(message)
    if code == -32601 or "does not support mcp" in low:
        return Unimplemented(message)
    if code == -32000:
        return ResourceExhausted(message, details=data)
    return Internal(message)


_TOOL_ERRORS = {"tool_not_found": NotFound, "invalid_args": InvalidArgument, "timeout": DeadlineExceeded}


def _tool_result(obj: Any) -> ToolResult:
    """An MCP ``CallToolResult`` (camelCase or OpenEnv's snake_case dump) as a ToolResult."""
    if not isinstance(obj, dict):
        text = "" if obj is None else (obj if isinstance(obj, str) else frames.dumps(obj))
        return ToolResult([{"type": "text", "text": text}], None if obj is None else {"result": obj})
    content = []
    for c in obj.get("content") or []:
        if isinstance(c, dict):
            content.append({k: v for k, v in c.items() if v is not None and k not in ("annotations", "meta", "_meta")})
    sc = obj.get("structuredContent", obj.get("structured_content"))
    if sc is not None and not isinstance(sc, dict):
        sc = {"result": sc}
    return ToolResult(content, sc, bool(obj.get("isError", obj.get("is_error", False))))


class WsTransport:
    """One session over a WebSocket; see the module docstring. Used by :class:`EnvClient`."""

    def __init__(self, base_url: str, *, client_name: str = "openenv-python",
                 options: Mapping[str, Any] | None = None, connect_timeout: float = 30.0,
                 max_message_bytes: int = 64 * 1024 * 1024, keepalive_s: float | None = 30.0,
                 ping_timeout_s: float | None = 20.0) -> None:
        self.base_url = base_url
        self.ws_url, self.http_url = split_url(base_url)
        self.client_name, self.options = client_name, dict(options or {})
        self.connect_timeout = connect_timeout
        self.max_message_bytes = max_message_bytes
        self.keepalive_s, self.ping_timeout_s = keepalive_s, ping_timeout_s
        self.extended = False  #: True when the server is our bridge (correlation ids)
        self.session_id = ""
        self.info = environment_pb2.EnvironmentInfo()
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._by_id: dict[int, asyncio.Future[Any]] = {}
        self._fifo: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._next_id = 0
        self._broken: EnvError | None = None
        self._closer: asyncio.Task[None] | None = None
        self._episode_id = ""
        self._step_count = 0
        self._pj: dict[str, PayloadJson] = {}

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> tuple[str, environment_pb2.EnvironmentInfo]:
        """Open the WebSocket (the server creates the session) and identify the server."""
        from websockets.asyncio.client import connect

        url = self.ws_url
        query = [f"client_name={quote(self.client_name)}"]
        if self.options:
            query.append("options=" + quote(frames.dumps(self.options)))
        url += ("&" if "?" in url else "?") + "&".join(query)
        kw: dict[str, Any] = {"open_timeout": self.connect_timeout, "max_size": self.max_message_bytes,
                              "ping_interval": self.keepalive_s or None, "ping_timeout": self.ping_timeout_s or None,
                              "compression": None, "close_timeout": 5}
        if _loopback(url):
            kw["proxy"] = None
        try:
            self._ws = await connect(url, **kw)
        except (OSError, TimeoutError) as e:
            raise Unavailable(f"cannot connect to {self.ws_url}: {e}", fatal=True) from e
        except Exception as e:  # websockets' handshake errors (InvalidStatus, InvalidURI, ...)
            raise Unavailable(f"cannot open a WebSocket to {self.ws_url}: {type(e).__name__}: {e}", fatal=True) from e
        self._reader = asyncio.ensure_future(self._read_loop())
        try:
            fut = self._expect(None)
            try:
                await self._ws.send(frames.dumps({"type": "openenv.hello", "id": 0}))
            except Exception:  # noqa: BLE001 - refused (capacity): the error frame is already queued
                pass
            reply = await asyncio.wait_for(fut, self.connect_timeout)
            if reply.get("type") == "openenv.hello":
                data = reply.get("data") or {}
                self.extended = True
                self.session_id = str(data.get("session_id", ""))
                self.info.ParseFromString(base64.b64decode(data.get("info_b64") or ""))
            elif reply.get("type") == "error" and (reply.get("data") or {}).get("code") == "UNKNOWN_TYPE":
                self.info = await self._stock_info()
            elif reply.get("type") == "error":
                err = _frame_error(reply.get("data"))
                err.fatal = True
                raise err
            else:
                raise Unavailable(f"unexpected first frame from {self.ws_url}: {str(reply)[:200]}", fatal=True)
        except TimeoutError:
            await self.close()
            raise Unavailable(f"{self.ws_url} did not answer within {self.connect_timeout:g} s", fatal=True) from None
        except BaseException:
            await self.close()
            raise
        return self.session_id, self.info

    async def _stock_info(self) -> environment_pb2.EnvironmentInfo:
        """Describe a stock OpenEnv server from ``/metadata`` and ``/schema`` (best effort)."""
        info = environment_pb2.EnvironmentInfo()
        for part in ("action", "observation", "state"):
            getattr(info, part).kind = payload_pb2.PAYLOAD_KIND_JSON
        try:
            import httpx

            async with httpx.AsyncClient(timeout=self.connect_timeout,
                                         trust_env=not _loopback(self.http_url)) as http:
                md = (await http.get(self.http_url + "/metadata")).json()
                schema = (await http.get(self.http_url + "/schema")).json()
        except Exception:  # noqa: BLE001 - the description is optional; the session works without it
            return info
        if isinstance(md, dict):
            info.name = str(md.get("name") or "")
            info.description = str(md.get("description") or "")
            info.version = str(md.get("version") or "")
            to_struct({k: v for k, v in md.items() if v is not None and k not in ("name", "description", "version")},
                      info.metadata)
        if isinstance(schema, dict):
            for part in ("action", "observation", "state"):
                if isinstance(schema.get(part), dict):
                    with contextlib.suppress(TypeError, ValueError):
                        to_struct(schema[part], getattr(info, part).json_schema)
        return info

    async def close(self) -> None:
        """Send OpenEnv's ``close`` (no reply) and close the socket."""
        ws, self._ws = self._ws, None
        if ws is not None and self._broken is None:
            with contextlib.suppress(Exception):
                await ws.send('{"type":"close"}')
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 5)
        if self._closer is not None:
            await asyncio.gather(self._closer, return_exceptions=True)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        self._fail(FailedPrecondition("the client is closed", fatal=True))

    # ------------------------------------------------------------------ wire

    def _expect(self, rid: int | None) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if rid is None:
            self._fifo.append(fut)
        else:
            self._by_id[rid] = fut
        return fut

    def _fail(self, err: EnvError) -> None:
        if self._broken is None:
            self._broken = err
        for fut in [*self._by_id.values(), *self._fifo]:
            if not fut.done():
                fut.set_exception(self._broken)
        self._by_id.clear()
        self._fifo.clear()

    async def _read_loop(self) -> None:
        from websockets.exceptions import ConnectionClosed

        err: EnvError | None = None
        try:
            async for raw in self._ws:
                try:
                    frame = frames.loads(raw)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                rid = frame.get("id")
                if rid is not None and rid in self._by_id:
                    fut = self._by_id.pop(rid)
                elif self._fifo:
                    fut = self._fifo.popleft()
                elif rid is None and frame.get("type") == "error":
                    # the server ended the session (idle timeout, drain): fatal for what follows
                    err = _frame_error(frame.get("data"))
                    err.fatal = True
                    self._fail(err)
                    continue
                else:
                    continue  # the late answer to a request that timed out: dropped
                if not fut.done():
                    fut.set_result(frame)
        except ConnectionClosed as e:
            err = Unavailable(f"the WebSocket closed ({e.rcvd.code if e.rcvd else 'no close frame'})", fatal=True)
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
        except Exception as e:  # noqa: BLE001 - any transport failure ends the session
            err = Unavailable(f"the WebSocket failed: {type(e).__name__}: {e}", fatal=True)
        finally:
            self._fail(err or Unavailable("the server closed the session", fatal=True))

    def _drop(self, why: EnvError) -> None:
        """Stock servers: abandon the connection so that no reply can shift (#1143)."""
        self._fail(why)
        ws, self._ws = self._ws, None
        if ws is not None:
            self._closer = asyncio.ensure_future(ws.close())

    async def _exchange(self, frame: dict[str, Any], timeout: float | None, expect_reply: bool = True) -> Any:
        if self._broken is not None:
            raise self._broken
        if self._ws is None:
            raise FailedPrecondition("not connected: use `async with` or await connect()")
        rid: int | None = None
        if self.extended:
            self._next_id += 1
            rid = frame["id"] = self._next_id
        text = frames.dumps(frame)
        if len(text) > self.max_message_bytes:
            raise ResourceExhausted(f"request of {len(text)} bytes exceeds the {self.max_message_bytes}-byte limit")
        fut = self._expect(rid) if expect_reply else None
        try:
            await self._ws.send(text)
        except Exception as e:  # the connection is gone
            if fut is not None and rid is not None:
                self._by_id.pop(rid, None)
            if self._broken is not None:
                raise self._broken from None
            raise Unavailable(f"the WebSocket failed: {e}", fatal=True) from e
        if fut is None:
            return None
        try:
            reply = await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except TimeoutError:
            if rid is not None:
                self._by_id.pop(rid, None)  # its late answer will be dropped
                raise DeadlineExceeded(f"no answer within {timeout:g} s (client-side timeout)") from None
            err = DeadlineExceeded(
                f"no answer within {timeout:g} s (client-side timeout); the connection was dropped so that a "
                "late answer cannot be taken for the next one (stock OpenEnv frames carry no request id)",
                fatal=True)
            self._drop(err)
            raise err from None
        if reply.get("type") == "error":
            raise _frame_error(reply.get("data"))
        return reply

    # ------------------------------------------------------------------ translation

    def _payload_json(self, part: str) -> PayloadJson:
        pj = self._pj.get(part)
        if pj is None:
            pj = self._pj[part] = PayloadJson(getattr(self.info, part), self.info)
        return pj

    def _action_json(self, p: payload_pb2.Payload) -> tuple[Any, str]:
        """(JSON action, tool kind: "call_tool", "list_tools" or "")."""
        if p.WhichOneof("kind") == "message":
            name = p.message.type_url.rsplit("/", 1)[-1]
            if name == CALL_TOOL:
                req = tool_pb2.CallToolRequest()
                p.message.Unpack(req)
                return {"type": "call_tool", "tool_name": req.name, "arguments": from_struct(req.arguments)}, \
                    "call_tool"
            if name == LIST_TOOLS:
                return {"type": "list_tools"}, "list_tools"
        return self._payload_json("action").to_json(p), ""

    def _time_step(self, data: dict[str, Any], ts: environment_pb2.TimeStep, tool: str) -> None:
        body = data.get("observation")
        reward = data.get("reward")
        if reward is not None:
            ts.reward = float(reward)
        if self.extended:
            meta = data.get("metadata") or {}
            ts.terminated = bool(data.get("terminated", data.get("done", False)))
            ts.truncated = bool(data.get("truncated", False))
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
            ts.terminated = bool(data.get("terminated", data.get("done", False)))
            ts.truncated = bool(data.get("truncated", False))
            ts.episode_id, ts.step_count = self._episode_id, self._step_count
            if tool == "call_tool" and isinstance(body, dict) and "tool_name" in body:
                error = body.get("error")
                if error:
                    cls = _TOOL_ERRORS.get(str(error.get("error_type", "")), Internal)
                    raise cls(str(error.get("message", "tool call failed")))
                resp = tool_pb2.CallToolResponse(name=str(body.get("tool_name", "")))
                _tool_result(body.get("result")).to_proto(resp.result)
                ts.observation.message.Pack(resp)
            elif tool == "list_tools" and isinstance(body, dict) and "tools" in body:
                ts.observation.message.Pack(self._tools(body["tools"]))
            elif body is not None and body != {}:
                to_value(body, ts.observation.json)
        if meta:
            to_struct(meta, ts.metadata)

    @staticmethod
    def _tools(tools: Any) -> tool_pb2.ListToolsResponse:
        out = tool_pb2.ListToolsResponse()
        for t in tools or []:
            if not isinstance(t, dict):
                continue
            pt = out.tools.add(name=str(t.get("name", "")), description=str(t.get("description") or ""))
            to_struct(t.get("inputSchema", t.get("input_schema")) or {"type": "object"}, pt.input_schema)
            osch = t.get("outputSchema", t.get("output_schema"))
            if osch:
                to_struct(osch, pt.output_schema)
        return out

    async def _rpc(self, method: str, params: dict[str, Any], timeout: float | None,
                   tool_timeout: float | None = None) -> Any:
        self._next_id += 1
        frame: dict[str, Any] = {"type": "mcp", "data": {"jsonrpc": "2.0", "id": self._next_id, "method": method,
                                                         "params": params}}
        if tool_timeout is not None and self.extended:
            frame["timeout_s"] = tool_timeout
        reply = await self._exchange(frame, timeout)
        data = reply.get("data") or {}
        if data.get("error") is not None:
            raise _rpc_error(data["error"])
        return data.get("result")

    async def request(self, req: environment_pb2.SessionRequest,
                      timeout: float | None = None) -> environment_pb2.SessionResponse:
        """Answer one protocol request over the WebSocket (raises the error-table classes)."""
        kind = req.WhichOneof("kind")
        resp = environment_pb2.SessionResponse(request_id=req.request_id)
        if kind == "step":
            st = req.step
            action, tool = self._action_json(st.action)
            frame: dict[str, Any] = {"type": "step", "data": action}
            if st.HasField("timeout"):
                if not self.extended:
                    raise Unimplemented("a per-step timeout needs an openenv server; stock OpenEnv servers have none")
                frame["timeout_s"] = st.timeout.ToNanoseconds() / 1e9
            reply = await self._exchange(frame, timeout)
            self._time_step(reply.get("data") or {}, resp.step.time_step, tool)
            if not self.extended and tool != "list_tools":
                self._step_count += 1
                resp.step.time_step.step_count = self._step_count
        elif kind == "reset":
            r = req.reset
            data: dict[str, Any] = dict(from_struct(r.options))
            if r.HasField("seed"):
                data["seed"] = r.seed
            if r.episode_id:
                data["episode_id"] = r.episode_id
            reply = await self._exchange({"type": "reset", "data": data}, timeout)
            self._episode_id, self._step_count = r.episode_id, 0
            self._time_step(reply.get("data") or {}, resp.reset.time_step, "")
        elif kind == "state":
            reply = await self._exchange({"type": "state"}, timeout)
            self._state(reply.get("data") or {}, resp.state)
        elif kind == "list_tools":
            result = await self._rpc("tools/list", {}, timeout)
            resp.list_tools.CopyFrom(self._tools((result or {}).get("tools")))
        elif kind == "call_tool":
            c = req.call_tool
            tt = c.timeout.ToNanoseconds() / 1e9 if c.HasField("timeout") else None
            result = await self._rpc("tools/call", {"name": c.name, "arguments": from_struct(c.arguments)},
                                     timeout, tt)
            if isinstance(result, dict) and "tool_name" in result:  # an OpenEnv step-style dump
                if result.get("error"):
                    e = result["error"]
                    raise _TOOL_ERRORS.get(str(e.get("error_type", "")), Internal)(str(e.get("message", "")))
                result = result.get("result")
            resp.call_tool.name = c.name
            _tool_result(result).to_proto(resp.call_tool.result)
        elif kind == "close":
            if self._broken is None and self._ws is not None:
                await self._exchange({"type": "close"}, None, expect_reply=False)
            resp.close.SetInParent()
        else:
            raise InvalidArgument(f"{kind or 'an empty request'} cannot be sent over the WebSocket transport")
        return resp

    def _state(self, data: dict[str, Any], out: environment_pb2.StateResponse) -> None:
        from openenv.session import EpisodeStatus

        out.episode_id = str(data.get("episode_id") or "")
        out.step_count = int(data.get("step_count") or 0)
        status = data.get("status")
        if isinstance(status, str) and status in EpisodeStatus.__members__:
            out.status = int(EpisodeStatus[status])
        else:
            out.status = int(EpisodeStatus.RUNNING if out.episode_id else EpisodeStatus.NOT_STARTED)
        if self.extended:
            if data.get("state") is not None:
                self._payload_json("state").from_json(data["state"], out.state)
            return
        rest = {k: v for k, v in data.items() if k not in ("episode_id", "step_count", "status")}
        if rest:
            to_value(rest, out.state.json)
