"""The capture proxy: an OpenAI- and Anthropic-compatible endpoint that forwards to the real one
and records every call.

A harness is pointed at the proxy through its usual base-URL setting. Each episode gets its own
base URL, ``{proxy}/e/{KEY}/v1``, registered with :meth:`CaptureProxy.register` along with the
tags (run, episode, environment session, task, agent) and the sink its calls go to; plain
``{proxy}/v1`` records under the tags given to the constructor (``openenv harness proxy``).

``POST .../chat/completions``, ``POST .../responses`` and ``POST .../messages`` (Anthropic's
Messages API, which Claude Code speaks: ``api`` ``messages`` in the trace) are recorded: the
request as the harness sent it, the response (a stream's events added up into the object a non-streaming call
returns), token ids and logprobs when the upstream returns them, usage, the status, and the
timings. Streams (SSE) reach the harness event by event as they arrive. Any other path (e.g.
``GET /v1/models``) is forwarded and not recorded. With ``request_tokens`` the proxy asks the
upstream for token data the harness did not ask for (``logprobs``, ``return_token_ids``: vLLM's
and the scripted model's; a hosted API may refuse the latter) and records what it added under
``injected``; the harness still gets the upstream's answer. The Messages API has no standard
slot for token data: the proxy records top-level ``prompt_token_ids``, ``token_ids`` and
``logprobs`` of a message (a stream's ``message_start`` message and ``content_block_delta``
events may carry them: the scripted model's convention), and asks for them with
``return_token_ids``.

The upstream's failures reach the harness as they are (status and body); an upstream that
cannot be reached is a 502 with an OpenAI-shaped error (Anthropic-shaped on ``/messages``).
Either way the call is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from openenv.harness._asgi import BodyTooLarge, Receive, Scope, Send, read_body, send_json

__all__ = ["CaptureProxy", "EpisodeTags", "assemble_stream", "token_data"]

#: Request headers forwarded to the upstream (the rest are hop-by-hop or the proxy's own).
_DROP_REQUEST = {"host", "content-length", "accept-encoding", "connection", "keep-alive", "transfer-encoding"}
_DROP_RESPONSE = {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}


@dataclasses.dataclass
class EpisodeTags:
    """What a call is tagged with, and where its row goes."""

    sink: Callable[[dict[str, Any]], None]
    run_id: str = ""
    episode_id: str = ""
    session_id: str = ""
    task_id: str | None = None
    agent: str = ""
    started: int = 0
    """Calls begun (the next call's index)."""
    finished: int = 0
    """Calls whose row reached the sink."""


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def token_data(api: str, response: Any) -> tuple[list[int] | None, list[int] | None, list[float] | None]:
    """``(prompt_token_ids, completion_token_ids, completion_logprobs)`` of a response, each
    ``None`` when the upstream did not return it (first choice / whole response)."""
    if not isinstance(response, Mapping):
        return None, None, None
    prompt = response.get("prompt_token_ids")
    ids: Any = None
    lps: Any = None
    if api == "chat.completions":
        choices = response.get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], Mapping) else {}
        ids = first.get("token_ids")
        content = (first.get("logprobs") or {}).get("content") if isinstance(first.get("logprobs"), Mapping) else None
        if isinstance(content, list):
            lps = [float(c["logprob"]) for c in content if isinstance(c, Mapping) and "logprob" in c]
    elif api == "messages":
        ids, lps = response.get("token_ids"), response.get("logprobs")
    else:
        ids = response.get("token_ids")
        lps = response.get("logprobs")
        if lps is None:
            found = [
                float(lp["logprob"])
                for item in response.get("output") or []
                if isinstance(item, Mapping)
                for part in item.get("content") or []
                if isinstance(part, Mapping)
                for lp in part.get("logprobs") or []
                if isinstance(lp, Mapping) and "logprob" in lp
            ]
            lps = found or None
    as_ints = [int(x) for x in prompt] if isinstance(prompt, list) else None
    return (
        as_ints,
        ([int(x) for x in ids] if isinstance(ids, list) else None),
        ([float(x) for x in lps] if isinstance(lps, list) else None),
    )


class _SseParser:
    """Splits a byte stream into SSE events (``data`` joined, ``event`` kept)."""

    def __init__(self) -> None:
        self._buf = b""
        self.events: list[tuple[str | None, str]] = []

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buf:
            block, self._buf = self._buf.split(b"\n\n", 1)
            self._event(block)

    def close(self) -> None:
        if self._buf.strip():
            self._event(self._buf)
        self._buf = b""

    def _event(self, block: bytes) -> None:
        name: str | None = None
        data: list[str] = []
        for line in block.decode("utf-8", errors="replace").split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            self.events.append((name, "\n".join(data)))


def assemble_stream(api: str, events: list[tuple[str | None, str]]) -> Any:
    """The response object a stream's events add up to (see the module's text)."""
    payloads = []
    for _, data in events:
        if data.strip() == "[DONE]":
            continue
        try:
            payloads.append(json.loads(data))
        except json.JSONDecodeError:
            continue
    if api == "responses":
        return _assemble_responses(payloads)
    if api == "messages":
        return _assemble_messages(payloads)
    return _assemble_chat(payloads)


def _assemble_chat(chunks: list[Any]) -> Any:
    out: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for ch in chunks:
        if not isinstance(ch, Mapping):
            continue
        for k in ("id", "model", "created", "system_fingerprint", "prompt_token_ids", "usage"):
            if ch.get(k) is not None:
                out[k] = ch[k]
        for c in ch.get("choices") or []:
            i = int(c.get("index", 0))
            cur = choices.setdefault(
                i, {"index": i, "message": {"role": "assistant", "content": None}, "finish_reason": None}
            )
            delta = c.get("delta") or {}
            msg = cur["message"]
            if delta.get("role"):
                msg["role"] = delta["role"]
            for text_key in ("content", "reasoning_content", "refusal"):
                if delta.get(text_key):
                    msg[text_key] = (msg.get(text_key) or "") + delta[text_key]
            for tc in delta.get("tool_calls") or []:
                calls = msg.setdefault("tool_calls", [])
                j = int(tc.get("index", len(calls)))
                while len(calls) <= j:
                    calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    calls[j]["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    calls[j]["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    calls[j]["function"]["arguments"] += fn["arguments"]
            lp = (c.get("logprobs") or {}).get("content") if isinstance(c.get("logprobs"), Mapping) else None
            if lp:
                cur.setdefault("logprobs", {"content": []})["content"].extend(lp)
            if c.get("token_ids"):
                cur.setdefault("token_ids", []).extend(c["token_ids"])
            if c.get("finish_reason"):
                cur["finish_reason"] = c["finish_reason"]
    out["choices"] = [choices[i] for i in sorted(choices)]
    return out


def _assemble_responses(events: list[Any]) -> Any:
    final: Any = None
    items: dict[int, Any] = {}
    logprobs: list[Any] = []
    for ev in events:
        if not isinstance(ev, Mapping):
            continue
        kind = ev.get("type")
        if kind in ("response.completed", "response.failed", "response.incomplete") or (
            kind == "response.created" and final is None
        ):
            final = dict(ev.get("response") or {})
        elif kind == "response.output_item.done":
            items[int(ev.get("output_index", len(items)))] = ev.get("item")
        elif kind == "response.output_text.delta" and ev.get("logprobs"):
            logprobs.extend(ev["logprobs"])
    if final is None:
        final = {"object": "response"}
    if not final.get("output") and items:
        final["output"] = [items[i] for i in sorted(items)]
    if logprobs and final.get("logprobs") is None:
        has = any(
            isinstance(p, Mapping) and p.get("logprobs")
            for it in final.get("output") or []
            if isinstance(it, Mapping)
            for p in it.get("content") or []
        )
        if not has:
            final["logprobs"] = [float(lp["logprob"]) for lp in logprobs if isinstance(lp, Mapping) and "logprob" in lp]
    return final


def _assemble_messages(events: list[Any]) -> Any:
    """The message an Anthropic Messages stream adds up to: ``message_start``'s message, each
    content block built from its start and deltas (text, thinking, signature, a tool_use's
    ``input`` parsed from its JSON deltas), ``message_delta``'s stop reason and usage merged;
    ``token_ids``/``logprobs`` carried by deltas appended in order."""
    message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    ids: list[Any] = []
    lps: list[Any] = []
    for ev in events:
        if not isinstance(ev, Mapping):
            continue
        kind = ev.get("type")
        if kind == "message_start" and isinstance(ev.get("message"), Mapping):
            message = {**ev["message"], "content": list(ev["message"].get("content") or [])}
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), Mapping):
            blocks[int(ev.get("index", len(blocks)))] = dict(ev["content_block"])
        elif kind == "content_block_delta":
            i = int(ev.get("index", 0))
            block = blocks.setdefault(i, {"type": "text", "text": ""})
            delta = ev.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = (block.get("text") or "") + str(delta.get("text", ""))
            elif dtype == "input_json_delta":
                partial[i] = partial.get(i, "") + str(delta.get("partial_json", ""))
            elif dtype == "thinking_delta":
                block["thinking"] = (block.get("thinking") or "") + str(delta.get("thinking", ""))
            elif dtype == "signature_delta":
                block["signature"] = (block.get("signature") or "") + str(delta.get("signature", ""))
            elif dtype == "citations_delta" and delta.get("citation") is not None:
                block.setdefault("citations", []).append(delta["citation"])
            if isinstance(ev.get("token_ids"), list):
                ids.extend(ev["token_ids"])
            if isinstance(ev.get("logprobs"), list):
                lps.extend(ev["logprobs"])
        elif kind == "message_delta":
            for k, v in (ev.get("delta") or {}).items():
                message[k] = v
            if isinstance(ev.get("usage"), Mapping):
                message["usage"] = {**(message.get("usage") or {}), **ev["usage"]}
        elif kind == "error":
            message["error"] = ev.get("error")
    for i, text in partial.items():
        try:
            blocks[i]["input"] = json.loads(text) if text.strip() else {}
        except ValueError:
            blocks[i]["input"] = {"_unparsed": text}  # kept as sent: a truncated stream
    if blocks:
        message["content"] = [blocks[i] for i in sorted(blocks)]
    if ids:
        message["token_ids"] = ids
    if lps:
        message["logprobs"] = lps
    return message


def _error_body(api: str | None, message: str, kind: str) -> dict[str, Any]:
    """An error in the shape of the harness's API (Anthropic's for ``messages``)."""
    if api == "messages":
        return {
            "type": "error",
            "error": {"type": "api_error" if kind == "upstream_error" else kind, "message": message},
        }
    return {"error": {"message": message, "type": kind}}


class CaptureProxy:
    """The ASGI app of the capture proxy (see the module's text).

    ``upstream`` is the real endpoint's base URL (``http://host:8000/v1``); ``api_key``
    replaces the harness's ``Authorization`` when given (the harness then needs no real key);
    ``default`` tags the calls made on ``/v1`` directly (none: those get 404).
    """

    def __init__(
        self,
        upstream: str,
        *,
        api_key: str | None = None,
        request_tokens: bool = False,
        default: EpisodeTags | None = None,
        timeout_s: float = 600.0,
        sampling: Mapping[str, Any] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.sampling = dict(sampling or {})
        """A pinned sampling policy (a trainer's): each of its fields replaces the harness's value
        in every recorded call, and is recorded under ``injected`` (RFC 0017)."""
        self.api_key = api_key
        self.request_tokens = request_tokens
        self.default = default
        self.timeout_s = timeout_s
        self._episodes: dict[str, EpisodeTags] = {}
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None

    def register(self, key: str, tags: EpisodeTags) -> None:
        """Route ``/e/{key}/v1/...`` to ``tags`` (its calls are numbered from 0)."""
        with self._lock:
            self._episodes[key] = tags

    def unregister(self, key: str) -> None:
        with self._lock:
            self._episodes.pop(key, None)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=32)
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s, connect=30.0), limits=limits)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _route(self, path: str) -> tuple[EpisodeTags | None, str] | None:
        """``(tags, rest)`` for a path, rest relative to the upstream's base (``/chat/completions``)."""
        if path.startswith("/e/"):
            key, _, rest = path[3:].partition("/")
            with self._lock:
                tags = self._episodes.get(key)
            if tags is None or not rest.startswith("v1"):
                return None
            return tags, rest[2:] or "/"
        if path.startswith("/v1"):
            return self.default, path[3:] or "/"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        routed = self._route(scope["path"])
        if routed is None:
            err = {"message": f"unknown episode or path {scope['path']}", "type": "not_found"}
            await send_json(send, 404, {"error": err})
            return
        tags, rest = routed
        try:
            body = await read_body(receive)
        except BodyTooLarge as e:
            await send_json(send, 413, {"error": {"message": str(e), "type": "invalid_request_error"}})
            return
        tail = rest.rstrip("/")
        api = (
            "chat.completions"
            if tail.endswith("/chat/completions")
            else "responses"
            if tail.endswith("/responses")
            else "messages"
            if tail.endswith("/messages")
            else None
        )
        # Anthropic's clients authenticate with x-api-key (or a bearer token): replaced as well.
        anthropic = api == "messages" or "/messages/" in tail
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.decode("latin-1").lower() not in _DROP_REQUEST
        ]
        if self.api_key is not None:
            headers = [(k, v) for k, v in headers if k.lower() not in ("authorization", "x-api-key")]
            headers.append(("x-api-key", self.api_key) if anthropic else ("authorization", f"Bearer {self.api_key}"))
        query = scope.get("query_string", b"").decode("latin-1")
        url = self.upstream + rest + (f"?{query}" if query else "")
        if api is None or scope["method"] != "POST" or tags is None:
            if api is not None and tags is None:
                await send_json(send, 404, _error_body(api, "no episode on /v1 here", "not_found"))
                return
            await self._forward_plain(scope["method"], url, headers, body, send)
            return
        await self._forward_call(api, tags, url, headers, body, send)

    async def _forward_plain(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes, send: Send
    ) -> None:
        try:
            r = await self._http().request(method, url, headers=headers, content=body)
        except httpx.HTTPError as e:
            await send_json(send, 502, {"error": {"message": f"upstream unreachable: {e}", "type": "upstream_error"}})
            return
        await _send_raw(send, r.status_code, r.headers.multi_items(), r.content)

    async def _forward_call(
        self, api: str, tags: EpisodeTags, url: str, headers: list[tuple[str, str]], body: bytes, send: Send
    ) -> None:
        started, t0 = time.time(), time.perf_counter()
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError:
            await send_json(send, 400, _error_body(api, "the body must be a JSON object", "invalid_request_error"))
            return
        index = tags.started
        tags.started += 1
        sent, injected = self._with_token_requests(api, request)
        stream = bool(request.get("stream"))
        ttft: float | None = None
        status = 502
        error: str | None = None
        response: Any = None
        opened = False  # the response head went to the harness
        try:
            # The harness's bytes go upstream unchanged unless token requests were added.
            content = json.dumps(sent).encode() if injected else body
            out = [(k, v) for k, v in headers if k.lower() != "content-type"] + [("content-type", "application/json")]
            async with self._http().stream("POST", url, headers=out, content=content) as r:
                status = r.status_code
                out_headers = [(k, v) for k, v in r.headers.multi_items() if k.lower() not in _DROP_RESPONSE]
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers],
                    }
                )
                opened = True
                is_sse = "text/event-stream" in r.headers.get("content-type", "")
                parser = _SseParser()
                raw = bytearray()
                async for chunk in r.aiter_bytes():
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    (parser.feed if is_sse else raw.extend)(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if is_sse:
                    parser.close()
                    response = assemble_stream(api, parser.events)
                else:
                    try:
                        response = json.loads(bytes(raw))
                    except ValueError:
                        response = {"raw": bytes(raw).decode("utf-8", errors="replace")}
                if status >= 400:
                    error = f"upstream status {status}"
        except httpx.HTTPError as e:
            error = f"upstream unreachable: {e}" if not opened else f"upstream failed mid-answer: {e}"
        except Exception as e:  # noqa: BLE001 - the harness went away mid-answer: the call is still recorded
            error = f"{type(e).__name__}: {e}"
        prompt_ids, ids, lps = token_data(api, response)
        usage = response.get("usage") if isinstance(response, Mapping) else None
        model = (response.get("model") if isinstance(response, Mapping) else None) or request.get("model")
        row = {
            "run_id": tags.run_id, "episode_id": tags.episode_id, "session_id": tags.session_id,
            "task_id": tags.task_id, "agent": tags.agent, "call_index": index, "api": api, "model": model,
            "stream": stream, "status": status, "error": error, "request": _json_text(request),
            "injected": _json_text(injected), "response": _json_text(response), "prompt_token_ids": prompt_ids,
            "completion_token_ids": ids, "completion_logprobs": lps, "usage": _json_text(usage),
            "started_at": started, "ttft_s": ttft, "duration_s": time.perf_counter() - t0,
        }  # fmt: skip
        try:
            # Written before the response ends: a call the harness saw complete is in the trace.
            await asyncio.to_thread(tags.sink, row)
        finally:
            tags.finished += 1
            with contextlib.suppress(Exception):  # the harness may have gone
                if opened:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                else:
                    await send_json(send, 502, _error_body(api, str(error), "upstream_error"))

    def _with_token_requests(self, api: str, request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        # A trainer's pinned policy wins over the harness's own knobs: logprobs sampled under
        # another temperature or a truncated distribution are not the policy's (RFC 0017).
        injected: dict[str, Any] = {k: v for k, v in self.sampling.items() if request.get(k) != v}
        if not self.request_tokens:
            return ({**request, **injected}, injected) if injected else (request, {})
        if not request.get("return_token_ids"):
            injected["return_token_ids"] = True
        if api == "chat.completions":
            if not request.get("logprobs"):
                injected["logprobs"] = True
        elif api == "messages":
            pass  # no standard logprobs field: return_token_ids asks for ids and logprobs
        else:
            include = list(request.get("include") or [])
            if "message.output_text.logprobs" not in include:
                injected["include"] = [*include, "message.output_text.logprobs"]
        return {**request, **injected}, injected


async def _send_raw(send: Send, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    head = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers if k.lower() not in _DROP_RESPONSE]
    head.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
