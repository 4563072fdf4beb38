"""A scripted OpenAI- and Anthropic-compatible model: deterministic replies for tests and offline demos.

:class:`ScriptedModel` serves ``POST /v1/chat/completions``, ``POST /v1/responses`` and
Anthropic's ``POST /v1/messages`` (plain JSON or Server-Sent Events when ``stream`` is set),
``POST /v1/messages/count_tokens`` and ``GET /v1/models``. Its replies come from
a :class:`Script`: turn ``n`` of a conversation (``n`` = the assistant turns already in the
request) plays step ``n``; past the end it says the last text again. The server keeps no
state between requests, so any number of conversations may run at once.

A step is one of

* ``{"shell": "CMD"}``: a call of the request's shell tool, shaped for the harness that sent
  it (``bash`` ``{"command": CMD}`` as mini-swe-agent; ``exec_command`` ``{"cmd": CMD}``,
  ``shell_command`` ``{"command": CMD}`` or ``shell`` ``{"command": ["bash", "-lc", CMD]}`` as
  Codex CLI; ``bash`` as OpenCode; ``Bash`` ``{"command": CMD}`` as Claude Code);
* ``{"tool": NAME, "arguments": {...}}``: a call of a named tool;
* ``{"mcp": NAME, "arguments": {...}}``: a call of the MCP tool ``NAME`` as the harness names
  it (the offered tool called ``NAME`` or ending in ``__NAME`` / ``_NAME``: Codex's and Claude
  Code's ``mcp__SERVER__NAME``, OpenCode's ``SERVER_NAME``);
* ``{"text": "..."}``: a plain assistant message (a harness ends its run on it).

Token data, as a vLLM server returns it when asked: the "tokenizer" is the UTF-8 bytes of the
text (or of the tool call's JSON), so ids are 0..255 and decode back exactly. With
``logprobs: true`` (chat) the standard ``choices[].logprobs.content`` carries them; with
``return_token_ids: true`` the response carries ``prompt_token_ids`` (the bytes of the
request's canonical JSON messages) and ``choices[].token_ids``. The Responses API has no
standard slot, so with ``return_token_ids`` the response object carries ``prompt_token_ids``,
``token_ids`` and ``logprobs`` (floats), the same names; so does a Messages API message (a
stream: ``prompt_token_ids`` on ``message_start``'s message, ``token_ids`` and ``logprobs`` on each
``content_block_delta`` event). A Messages API turn is the assistant messages already in the
request, as for chat.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.harness._asgi import BodyTooLarge, Receive, Scope, Send, read_body, send_json, sse_start

__all__ = ["Script", "ScriptedModel", "byte_tokens", "load_script"]


@dataclasses.dataclass(frozen=True)
class Script:
    """The steps a scripted model plays, turn by turn (see the module's text)."""

    steps: tuple[Mapping[str, Any], ...]
    model: str = "scripted"

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a script needs at least one step")
        for i, s in enumerate(self.steps):
            kinds = [k for k in ("shell", "tool", "mcp", "text") if k in s]
            if len(kinds) != 1:
                raise ValueError(f"step {i}: exactly one of shell, tool, mcp or text, got {sorted(s)}")
            if not isinstance(s.get("arguments", {}), Mapping):
                raise ValueError(f"step {i}: arguments must be an object")

    @classmethod
    def from_json(cls, data: Any) -> Script:
        """From ``{"model": ..., "steps": [...]}`` or a bare list of steps."""
        if isinstance(data, list):
            return cls(tuple(data))
        if not isinstance(data, Mapping) or not isinstance(data.get("steps"), list):
            raise ValueError('a script is a list of steps or {"steps": [...], "model": ...}')
        return cls(tuple(data["steps"]), str(data.get("model", "scripted")))


def load_script(path: str | Path) -> Script:
    """A script from a JSON file."""
    return Script.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def byte_tokens(text: str) -> list[int]:
    """The scripted model's token ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def _logprob(i: int) -> float:
    return -0.001 - 0.01 * (i % 7)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclasses.dataclass
class _Reply:
    """One turn: either text or a single tool call."""

    text: str | None = None
    call_name: str | None = None
    call_args: str | None = None
    namespace: str | None = None
    """The Responses namespace of the called tool (Codex's MCP servers), if any."""

    @property
    def generated(self) -> str:
        """What the model "generated", the text its token ids encode."""
        if self.text is not None:
            return self.text
        return _canonical({"name": self.call_name, "arguments": json.loads(self.call_args or "{}")})


def _tool_names(tools: Sequence[Any]) -> dict[str, Any]:
    """Function tool name -> its parameters schema, for both APIs' tool shapes. The tools of a
    Responses ``namespace`` tool (Codex's MCP servers) are named ``NAMESPACE__NAME``."""
    out: dict[str, Any] = {}
    for t in tools or ():
        if not isinstance(t, Mapping):
            continue
        if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            for inner_name, params in _tool_names(t["tools"]).items():
                out[f"{t.get('name')}__{inner_name}"] = params
            continue
        inner = t.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else t
        name = fn.get("name")
        if isinstance(name, str):
            out[name] = fn.get("parameters") or fn.get("input_schema") or {}  # OpenAI's / Anthropic's
    return out


def _mcp_name(name: str, tools: Mapping[str, Any]) -> str:
    if name in tools:
        return name
    found = sorted((t for t in tools if t.endswith(f"__{name}") or t.endswith(f"_{name}")), key=len)
    if not found:
        raise LookupError(f"the request offers no MCP tool {name!r} (tools: {sorted(tools)})")
    return found[0]


def _shell_call(command: str, tools: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if "bash" in tools:
        return "bash", {"command": command}
    if "Bash" in tools:  # Claude Code
        return "Bash", {"command": command}
    if "exec_command" in tools:
        return "exec_command", {"cmd": command}
    if "shell_command" in tools:
        return "shell_command", {"command": command}
    if "shell" in tools:
        kind = (tools["shell"].get("properties", {}).get("command") or {}).get("type")
        return "shell", {"command": ["bash", "-lc", command] if kind == "array" else command}
    raise LookupError(f"the request offers no shell tool (tools: {sorted(tools)})")


class ScriptedModel:
    """The ASGI app of a scripted model (see the module's text)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests = 0

    def _reply(self, turn: int, tools: Mapping[str, Any], namespaces: Mapping[str, str] | None = None) -> _Reply:
        steps = self.script.steps
        step: Mapping[str, Any] = (
            steps[turn] if turn < len(steps) else next((s for s in reversed(steps) if "text" in s), {"text": ""})
        )
        if "text" in step:
            return _Reply(text=str(step["text"]))
        if "shell" in step:
            try:
                name, args = _shell_call(str(step["shell"]), tools)
            except LookupError as e:
                return _Reply(text=f"[scripted model] {e}")
            return _Reply(call_name=name, call_args=json.dumps(args))
        arguments: Mapping[str, Any] = step.get("arguments") or {}
        name = str(step.get("tool") or "")
        if "mcp" in step:
            try:
                name = _mcp_name(str(step["mcp"]), tools)
            except LookupError as e:
                return _Reply(text=f"[scripted model] {e}")
            ns = (namespaces or {}).get(name)
            if ns is not None:
                return _Reply(call_name=name[len(ns) + 2 :], call_args=json.dumps(dict(arguments)), namespace=ns)
        return _Reply(call_name=name, call_args=json.dumps(dict(arguments)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/")
        method = scope["method"]
        if method == "GET" and path.endswith("/models"):
            model = {"id": self.script.model, "object": "model", "created": 0, "owned_by": "openenv"}
            await send_json(send, 200, {"object": "list", "data": [model]})
            return
        routes = ("/chat/completions", "/responses", "/messages", "/messages/count_tokens")
        if method != "POST" or not path.endswith(routes):
            await send_json(send, 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})
            return
        try:
            req = json.loads(await read_body(receive))
            if not isinstance(req, dict):
                raise ValueError("the body must be a JSON object")
        except (BodyTooLarge, ValueError) as e:
            await send_json(send, 400, {"error": {"message": str(e), "type": "invalid_request_error"}})
            return
        if path.endswith("/count_tokens"):  # not a model call: not counted
            prompt = _canonical({"system": req.get("system"), "messages": req.get("messages") or []})
            await send_json(send, 200, {"input_tokens": len(byte_tokens(prompt))})
            return
        self.requests += 1
        if path.endswith("/chat/completions"):
            await self._chat(req, send)
        elif path.endswith("/messages"):
            await self._messages(req, send)
        else:
            await self._responses(req, send)

    # -- chat completions ---------------------------------------------------------------------

    async def _chat(self, req: dict[str, Any], send: Send) -> None:
        messages = req.get("messages") or []
        turn = sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant")
        reply = self._reply(turn, _tool_names(req.get("tools") or []))
        prompt_ids = byte_tokens(_canonical(messages))
        ids = byte_tokens(reply.generated)
        rid = "chatcmpl-" + hashlib.sha1(f"{_canonical(messages)}|{turn}".encode()).hexdigest()[:24]
        created = int(time.time())
        want_lp, want_ids = bool(req.get("logprobs")), bool(req.get("return_token_ids"))
        model = str(req.get("model") or self.script.model)
        finish = "stop" if reply.text is not None else "tool_calls"
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + len(ids),
        }
        call_id = f"call_{rid[-12:]}"
        if not req.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.call_name is not None:
                message["tool_calls"] = [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": reply.call_name, "arguments": reply.call_args},
                    }
                ]
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            if want_lp:
                choice["logprobs"] = {"content": _lp_content(ids, 0)}
            if want_ids:
                choice["token_ids"] = ids
            out: dict[str, Any] = {
                "id": rid, "object": "chat.completion", "created": created, "model": model,
                "choices": [choice], "usage": usage,
            }  # fmt: skip
            if want_ids:
                out["prompt_token_ids"] = prompt_ids
            await send_json(send, 200, out)
            return
        await sse_start(send)
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}

        async def chunk(delta: dict[str, Any], *, finish_reason: str | None = None, start: int = 0, n: int = 0) -> None:
            ch: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            if want_lp and n:
                ch["logprobs"] = {"content": _lp_content(ids[start : start + n], start)}
            if want_ids:
                ch["token_ids"] = ids[start : start + n]
            payload: dict[str, Any] = {**base, "choices": [ch]}
            if want_ids and start == 0 and delta.get("role"):
                payload["prompt_token_ids"] = prompt_ids
            await _sse(send, payload)

        await chunk({"role": "assistant", "content": "" if reply.text is not None else None})
        pieces = list(_pieces(reply.text if reply.text is not None else reply.call_args or ""))
        pos = 0
        if reply.text is not None:
            for piece in pieces:
                n = len(piece.encode())
                await chunk({"content": piece}, start=pos, n=n)
                pos += n
        else:
            head = {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": reply.call_name, "arguments": ""},
            }
            await chunk({"tool_calls": [head]})
            # Tool call tokens: the generated JSON's bytes, spread over the argument pieces.
            per = max(1, -(-len(ids) // max(1, len(pieces))))
            for piece in pieces:
                n = min(per, len(ids) - pos)
                await chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, start=pos, n=n)
                pos += n
            if pos < len(ids):
                await chunk({}, start=pos, n=len(ids) - pos)
        await chunk({}, finish_reason=finish)
        if (req.get("stream_options") or {}).get("include_usage"):
            await _sse(send, {**base, "choices": [], "usage": usage})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    # -- responses ----------------------------------------------------------------------------

    async def _responses(self, req: dict[str, Any], send: Send) -> None:
        items = req.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
        turn = sum(
            1
            for it in items
            if isinstance(it, Mapping)
            and (
                it.get("type") in ("function_call", "custom_tool_call", "local_shell_call")
                or (it.get("role") == "assistant" and it.get("type", "message") == "message")
            )
        )
        offered = req.get("tools") or []
        namespaces = {
            f"{t.get('name')}__{name}": str(t.get("name"))
            for t in offered
            if isinstance(t, Mapping) and t.get("type") == "namespace" and isinstance(t.get("tools"), list)
            for name in _tool_names(t["tools"])
        }
        reply = self._reply(turn, _tool_names(offered), namespaces)
        prompt_ids = byte_tokens(_canonical({"instructions": req.get("instructions"), "input": items}))
        ids = byte_tokens(reply.generated)
        rid = "resp_" + hashlib.sha1(f"{_canonical(items)}|{turn}".encode()).hexdigest()[:24]
        model = str(req.get("model") or self.script.model)
        want_lp = "message.output_text.logprobs" in (req.get("include") or [])
        want_ids = bool(req.get("return_token_ids"))
        if reply.text is not None:
            part: dict[str, Any] = {"type": "output_text", "text": reply.text, "annotations": []}
            if want_lp:
                part["logprobs"] = _lp_content(ids, 0)
            item: dict[str, Any] = {
                "type": "message", "id": f"msg_{rid[5:]}", "status": "completed", "role": "assistant",
                "content": [part],
            }  # fmt: skip
        else:
            item = {
                "type": "function_call", "id": f"fc_{rid[5:]}", "call_id": f"call_{rid[5:17]}", "status": "completed",
                "name": reply.call_name, "arguments": reply.call_args,
            }  # fmt: skip
            if reply.namespace is not None:
                item["namespace"] = reply.namespace
        usage = {
            "input_tokens": len(prompt_ids),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": len(ids),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": len(prompt_ids) + len(ids),
        }
        resp: dict[str, Any] = {
            "id": rid, "object": "response", "created_at": int(time.time()), "status": "completed", "model": model,
            "output": [item], "usage": usage, "error": None, "incomplete_details": None,
            "parallel_tool_calls": False, "tool_choice": req.get("tool_choice", "auto"),
            "tools": req.get("tools") or [],
        }  # fmt: skip
        if want_ids:
            resp.update(prompt_token_ids=prompt_ids, token_ids=ids, logprobs=[_logprob(i) for i in range(len(ids))])
        if not req.get("stream"):
            await send_json(send, 200, resp)
            return
        await sse_start(send)
        seq = iter(range(1_000_000))

        async def event(kind: str, **fields: Any) -> None:
            await _sse(send, {"type": kind, "sequence_number": next(seq), **fields}, event=kind)

        pending = {**resp, "status": "in_progress", "output": [], "usage": None}
        for k in ("prompt_token_ids", "token_ids", "logprobs"):
            pending.pop(k, None)
        await event("response.created", response=pending)
        await event("response.in_progress", response=pending)
        started = {**item, "status": "in_progress"}
        if item["type"] == "message":
            started["content"] = []
        else:
            started["arguments"] = ""
        await event("response.output_item.added", output_index=0, item=started)
        if item["type"] == "message":
            empty = {"type": "output_text", "text": "", "annotations": []}
            await event("response.content_part.added", item_id=item["id"], output_index=0, content_index=0, part=empty)
            pos = 0
            for piece in _pieces(reply.text or ""):
                n = len(piece.encode())
                extra = {"logprobs": _lp_content(ids[pos : pos + n], pos)} if want_lp else {}
                await event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=0,
                    content_index=0,
                    delta=piece,
                    **extra,
                )
                pos += n
            await event(
                "response.output_text.done", item_id=item["id"], output_index=0, content_index=0, text=reply.text or ""
            )
            await event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                part=item["content"][0],
            )
        else:
            for piece in _pieces(reply.call_args or ""):
                await event("response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=piece)
            await event(
                "response.function_call_arguments.done", item_id=item["id"], output_index=0, arguments=reply.call_args
            )
        await event("response.output_item.done", output_index=0, item=item)
        await event("response.completed", response=resp)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- Anthropic messages -------------------------------------------------------------------

    async def _messages(self, req: dict[str, Any], send: Send) -> None:
        messages = req.get("messages") or []
        turn = sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant")
        reply = self._reply(turn, _tool_names(req.get("tools") or []))
        prompt_ids = byte_tokens(_canonical({"system": req.get("system"), "messages": messages}))
        ids = byte_tokens(reply.generated)
        rid = hashlib.sha1(f"{_canonical(messages)}|{turn}".encode()).hexdigest()[:24]
        model = str(req.get("model") or self.script.model)
        want_ids = bool(req.get("return_token_ids"))
        if reply.text is not None:
            block: dict[str, Any] = {"type": "text", "text": reply.text}
        else:
            args = json.loads(reply.call_args or "{}")
            block = {"type": "tool_use", "id": f"toolu_{rid[:20]}", "name": reply.call_name, "input": args}
        stop = "end_turn" if reply.text is not None else "tool_use"
        usage = {
            "input_tokens": len(prompt_ids), "output_tokens": len(ids),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        }  # fmt: skip
        msg: dict[str, Any] = {
            "id": f"msg_{rid}", "type": "message", "role": "assistant", "model": model, "content": [block],
            "stop_reason": stop, "stop_sequence": None, "usage": usage,
        }  # fmt: skip
        if not req.get("stream"):
            if want_ids:
                msg.update(prompt_token_ids=prompt_ids, token_ids=ids, logprobs=[_logprob(i) for i in range(len(ids))])
            await send_json(send, 200, msg)
            return
        await sse_start(send)

        async def event(kind: str, **fields: Any) -> None:
            await _sse(send, {"type": kind, **fields}, event=kind)

        start = {**msg, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
        if want_ids:
            start["prompt_token_ids"] = prompt_ids
        await event("message_start", message=start)
        opened = {**block, "text": ""} if reply.text is not None else {**block, "input": {}}
        await event("content_block_start", index=0, content_block=opened)
        await event("ping")
        text = reply.text if reply.text is not None else reply.call_args or ""
        pieces = list(_pieces(text))
        pos = 0
        for k, piece in enumerate(pieces):
            if reply.text is not None:
                delta = {"type": "text_delta", "text": piece}
                n = len(piece.encode())
            else:  # the tool call's tokens, spread over its JSON pieces (the last takes the rest)
                delta = {"type": "input_json_delta", "partial_json": piece}
                per = max(1, -(-len(ids) // len(pieces)))
                n = len(ids) - pos if k == len(pieces) - 1 else min(per, len(ids) - pos)
            extra = (
                {"token_ids": ids[pos : pos + n], "logprobs": [_logprob(pos + i) for i in range(n)]} if want_ids else {}
            )
            await event("content_block_delta", index=0, delta=delta, **extra)
            pos += n
        await event("content_block_stop", index=0)
        await event(
            "message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": len(ids)}
        )
        await event("message_stop")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _lp_content(ids: Sequence[int], start: int) -> list[dict[str, Any]]:
    """OpenAI's per-token logprobs entries for byte tokens (``token`` is the byte as text)."""
    return [
        {"token": bytes([t]).decode("latin-1"), "logprob": _logprob(start + i), "bytes": [t], "top_logprobs": []}
        for i, t in enumerate(ids)
    ]


def _pieces(text: str, size: int = 24) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]
    if not text:
        return


async def _sse(send: Send, payload: Any, event: str | None = None) -> None:
    head = f"event: {event}\n" if event else ""
    body = f"{head}data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()
    await send({"type": "http.response.body", "body": body, "more_body": True})
