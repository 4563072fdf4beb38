"""A leaf scored by a language model behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from openenv.errors import Internal
from openenv.runtime.rubrics.base import (
    Rubric,
    Score,
)

DEFAULT_JUDGE_SYSTEM_PROMPT = (
    "You are a strict grader. Read the task and the response, then reply with a short "
    "justification followed by a final line of the form 'Score: X'."
)
DEFAULT_SCORE_PATTERN = r"(?i)\bscore\b\**\s*(?:is|=|:)?\s*\**\s*(-?\d+(?:\.\d+)?)"
_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*")


class JudgeError(Exception):
    """The judge could not produce a score (transport, HTTP status, unparsable reply)."""


class LLMJudge(Rubric):
    """A leaf scored by a language model behind any OpenAI-compatible chat endpoint.

    It POSTs ``{"model", "messages", "temperature", "max_tokens"}`` to
    ``{base_url}/chat/completions`` (``base_url`` as for OpenAI clients, e.g.
    ``"http://127.0.0.1:8000/v1"``; a URL already ending in ``/chat/completions`` is used
    as is) and reads ``choices[0].message.content``. The score is taken from, in order:
    a JSON object reply with a ``"score"`` (and optional ``"reason"``); the last match of
    ``score_pattern`` (default: ``Score: X``); a reply that is just a number. The raw
    score is mapped from ``scale`` to [0, 1] and clamped; the reply is the ``reason``.

    Failures (connection refused, timeout after ``timeout_s``, HTTP status >= 400, a
    malformed response, no score in the reply): with ``fallback_score=None`` (the default)
    the step fails with INTERNAL (``"LLM judge 'name' failed: ..."``); otherwise the node
    scores ``fallback_score`` and the reason says why.

    ``prompt`` is a ``str.format`` template with ``{action}`` and ``{observation}`` (and
    ``{env}``), or a function ``(action, observation) -> str``. The API key is ``api_key``
    or the environment variable named by ``api_key_env``, sent as a Bearer token when set.
    """

    description = "Scored by a language model judge."

    kind = "llm_judge"

    def __init__(
        self,
        prompt: str | Callable[[Any, Any], str],
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        system_prompt: str | None = DEFAULT_JUDGE_SYSTEM_PROMPT,
        score_pattern: str = DEFAULT_SCORE_PATTERN,
        scale: tuple[float, float] = (0.0, 1.0),
        temperature: float = 0.0,
        max_tokens: int | None = 512,
        timeout_s: float = 60.0,
        fallback_score: float | None = None,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
    ) -> None:
        super().__init__(name=name, description=description, weight=weight, minimum=0.0, maximum=1.0)
        lo, hi = (float(x) for x in scale)
        if hi <= lo:
            raise ValueError(f"LLMJudge scale must be (low, high) with low < high, got {scale}")
        if fallback_score is not None and not 0.0 <= fallback_score <= 1.0:
            raise ValueError("LLMJudge fallback_score must be in [0, 1]")
        self.prompt = prompt
        url = base_url.rstrip("/")
        self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.model, self.system_prompt = model, system_prompt
        self.api_key, self.api_key_env = api_key, api_key_env
        self.score_pattern = re.compile(score_pattern)
        self.scale = (lo, hi)
        self.temperature, self.max_tokens, self.timeout_s = float(temperature), max_tokens, float(timeout_s)
        self.fallback_score = None if fallback_score is None else float(fallback_score)
        self.headers, self.extra_body = dict(headers or {}), dict(extra_body or {})
        self._client: Any = None
        self._client_loop: Any = None

    # Configuration, never in a snapshot: the key and headers are secrets (a snapshot goes to
    # clients), and a restore naming the URL would send them elsewhere.
    snapshot_config = Rubric.snapshot_config | {
        "prompt", "url", "model", "system_prompt", "api_key", "api_key_env", "score_pattern", "scale",
        "temperature", "max_tokens", "timeout_s", "fallback_score", "headers", "extra_body",
    }  # fmt: skip

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"model": self.model, "scale": list(self.scale), "temperature": self.temperature}
        if self.fallback_score is not None:
            p["fallback_score"] = self.fallback_score
        return p

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = state["_client_loop"] = None  # never share a connection pool between copies
        return state

    def render(self, action: Any, observation: Any) -> str:
        """The user message for one step."""
        if callable(self.prompt):
            return self.prompt(action, observation)
        return self.prompt.format(action=action, observation=observation, env=self.env)

    def parse(self, text: str) -> tuple[float, str]:
        """``(raw score, reason)`` from a reply; ``JudgeError`` when there is none."""
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                obj = json.loads(stripped)
            except ValueError:
                obj = None
            if (
                isinstance(obj, dict)
                and isinstance(obj.get("score"), (int, float))
                and not isinstance(obj.get("score"), bool)
            ):
                return float(obj["score"]), str(obj.get("reason", obj.get("rationale", "")))
        matches = self.score_pattern.findall(text)
        if matches:
            last = matches[-1]
            return float(last if isinstance(last, str) else last[0]), stripped
        m = _NUMBER.fullmatch(text)
        if m:
            return float(m.group(1)), stripped
        raise JudgeError(f"no score in the judge's reply {stripped[:200]!r}")

    def normalize(self, raw: float) -> float:
        """Map a raw score from ``scale`` to [0, 1], clamped."""
        lo, hi = self.scale
        return min(1.0, max(0.0, (raw - lo) / (hi - lo)))

    async def complete(self, prompt: str) -> str:
        """One chat completion; the reply's text (``JudgeError`` on any failure)."""
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - httpx is a dependency of openenv
            raise JudgeError("LLMJudge needs httpx (pip install httpx)") from e
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:  # a pool belongs to one event loop
            self._client, self._client_loop = httpx.AsyncClient(timeout=self.timeout_s), loop
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body.update(self.extra_body)
        headers = dict(self.headers)
        key = self.api_key or os.environ.get(self.api_key_env or "", "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            resp = await self._client.post(self.url, json=body, headers=headers)
        except httpx.TimeoutException:
            raise JudgeError(f"no answer from {self.url} within {self.timeout_s:g} s") from None
        except httpx.HTTPError as e:
            raise JudgeError(f"request to {self.url} failed: {type(e).__name__}: {e}") from None
        if resp.status_code >= 400:
            raise JudgeError(f"{self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"malformed chat completion from {self.url}: {resp.text[:200]}") from None
        if not isinstance(content, str):
            raise JudgeError(f"the judge's reply has no text content: {content!r}"[:300])
        return content

    async def score(self, action: Any, observation: Any) -> Score:
        try:
            raw, reason = self.parse(await self.complete(self.render(action, observation)))
        except JudgeError as e:
            if self.fallback_score is None:
                raise Internal(f"LLM judge {self.name!r} failed: {e}") from None
            return Score(self.fallback_score, reason=f"judge failed, fallback score used: {e}")
        return Score(self.normalize(raw), reason=reason[:4000])

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            await client.aclose()
