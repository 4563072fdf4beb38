"""The harness trace format: a run directory of four JSONL files.

``calls.jsonl``, one row per model call the capture proxy forwarded (:data:`CALL_COLUMNS`):

``run_id``, ``episode_id``, ``session_id`` (the environment session's id), ``task_id``,
``agent``, ``call_index`` (0, 1, ... within the episode, in the order calls started), ``api``
(``chat.completions`` or ``responses``), ``model``, ``stream`` (bool), ``status`` (the
upstream's HTTP status; 502 when it could not be reached), ``error`` (str or null),
``request`` (JSON text: the body the harness sent, unchanged), ``injected`` (JSON text: the
fields the proxy added to ask the upstream for token data), ``response`` (JSON text: the
upstream's response; for a stream, the object its events add up to), ``prompt_token_ids``,
``completion_token_ids`` (lists of ints or null), ``completion_logprobs`` (list of floats or
null), ``usage`` (JSON text or null), ``started_at`` (Unix seconds), ``ttft_s`` (seconds to the
first response byte), ``duration_s``.

``steps.jsonl``: the episode's environment steps in the rollout record format of
:mod:`openenv.record.rows` (the reset, every tool call the agent made, with rewards), its
variable columns as JSON text (the format's :data:`~openenv.record.rows.SCHEMA`, as
``calls.jsonl`` keeps its JSON columns), so the loaders of ``openenv collect`` read it too.

``runs.jsonl``, one row per run (:data:`RUN_COLUMNS`): ``run_id``, ``target``, ``agent``,
``model``, ``model_url``, ``tasks``, ``concurrency``, ``time_budget_s``, ``request_tokens``,
``started_at``, ``protoenv`` (the version that wrote it), ``jail`` (the agents' jail settings,
JSON text; null: unconfined).

``episodes.jsonl``, one row per episode (:data:`EPISODE_COLUMNS`): ``run_id``, ``episode_id``,
``session_id``, ``task_id``, ``agent``, ``reward`` (the environment's return), ``solved``,
``status`` (``finished``: the environment ended the episode; ``unfinished``: the agent stopped
first; ``timeout``; ``error``), ``calls`` (model calls), ``agent_exit_code``, ``error``,
``started_at``, ``duration_s``, ``workspace`` (where the agent worked) and ``log`` (its output,
the last 64 KiB).

Token ids come from the upstream (vLLM's ``return_token_ids``; the scripted model); logprobs
from OpenAI's ``logprobs.content`` or the same extension. A hosted endpoint that returns none
leaves them null: the trace is still complete for SFT on the text.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.record.rows import SCHEMA

__all__ = [
    "CALL_COLUMNS",
    "EPISODE_COLUMNS",
    "JSON_CALL_COLUMNS",
    "RUN_COLUMNS",
    "TraceWriter",
    "decode_call",
    "load_trace",
    "read_trace",
    "to_grpo",
]

CALL_COLUMNS = (
    "run_id", "episode_id", "session_id", "task_id", "agent", "call_index", "api", "model", "stream", "status",
    "error", "request", "injected", "response", "prompt_token_ids", "completion_token_ids", "completion_logprobs",
    "usage", "started_at", "ttft_s", "duration_s",
)  # fmt: skip
"""The columns of ``calls.jsonl``."""

JSON_CALL_COLUMNS = ("request", "injected", "response", "usage")
"""Columns of ``calls.jsonl`` holding JSON text (their shapes vary by API and model)."""

EPISODE_COLUMNS = (
    "run_id", "episode_id", "session_id", "task_id", "agent", "reward", "solved", "status", "calls",
    "agent_exit_code", "error", "started_at", "duration_s", "workspace", "log",
)  # fmt: skip
"""The columns of ``episodes.jsonl``."""

RUN_COLUMNS = (
    "run_id", "target", "agent", "model", "model_url", "tasks", "concurrency", "time_budget_s", "request_tokens",
    "started_at", "protoenv", "jail",
)  # fmt: skip
"""The columns of ``runs.jsonl`` (``jail``: the agents' jail settings as JSON text, null when
the agents ran unconfined)."""

CALLS, STEPS, EPISODES, RUNS = "calls.jsonl", "steps.jsonl", "episodes.jsonl", "runs.jsonl"


def decode_call(row: Mapping[str, Any]) -> dict[str, Any]:
    """A call row with its JSON columns parsed back into Python values."""
    out = dict(row)
    for c in JSON_CALL_COLUMNS:
        if isinstance(out.get(c), str):
            out[c] = json.loads(out[c])
    return out


def _append(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if not text:
        return
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class TraceWriter:
    """Appends calls, steps and episodes to a run directory (thread-safe; one write per row
    or episode, so a crash loses at most the row being written)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def add_call(self, row: Mapping[str, Any]) -> None:
        missing = set(CALL_COLUMNS) - set(row)
        if missing:
            raise ValueError(f"call row lacks {sorted(missing)}")
        with self._lock:
            _append(self.directory / CALLS, [{c: row[c] for c in CALL_COLUMNS}])

    def add_steps(self, rows: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            _append(self.directory / STEPS, rows)

    def add_run(self, row: Mapping[str, Any]) -> None:
        with self._lock:
            _append(self.directory / RUNS, [{c: row.get(c) for c in RUN_COLUMNS}])

    def add_episode(self, row: Mapping[str, Any]) -> None:
        with self._lock:
            _append(self.directory / EPISODES, [{c: row.get(c) for c in EPISODE_COLUMNS}])


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a crash mid-write
                break
    return rows


def read_trace(directory: str | Path) -> dict[str, list[dict[str, Any]]]:
    """A run directory as plain rows: ``{"calls": [...], "steps": [...], "episodes": [...],
    "runs": [...]}`` (JSON columns left as text; :func:`decode_call` parses a call row)."""
    d = Path(directory)
    files = {"calls": CALLS, "steps": STEPS, "episodes": EPISODES, "runs": RUNS}
    return {name: _read_jsonl(d / f) for name, f in files.items()}


def _call_features() -> Any:
    import datasets

    ids = datasets.Sequence(datasets.Value("int64"))
    kinds = {
        "call_index": datasets.Value("int64"), "stream": datasets.Value("bool"), "status": datasets.Value("int64"),
        "prompt_token_ids": ids, "completion_token_ids": ids,
        "completion_logprobs": datasets.Sequence(datasets.Value("float64")),
        "started_at": datasets.Value("float64"), "ttft_s": datasets.Value("float64"),
        "duration_s": datasets.Value("float64"),
    }  # fmt: skip
    return datasets.Features({c: kinds.get(c, datasets.Value("string")) for c in CALL_COLUMNS})


def _episode_features() -> Any:
    import datasets

    kinds = {
        "reward": datasets.Value("float64"), "solved": datasets.Value("bool"), "calls": datasets.Value("int64"),
        "agent_exit_code": datasets.Value("int64"), "started_at": datasets.Value("float64"),
        "duration_s": datasets.Value("float64"),
    }  # fmt: skip
    return datasets.Features({c: kinds.get(c, datasets.Value("string")) for c in EPISODE_COLUMNS})


def _run_features() -> Any:
    import datasets

    kinds = {
        "tasks": datasets.Sequence(datasets.Value("string")), "concurrency": datasets.Value("int64"),
        "time_budget_s": datasets.Value("float64"), "request_tokens": datasets.Value("bool"),
        "started_at": datasets.Value("float64"),
    }  # fmt: skip
    return datasets.Features({c: kinds.get(c, datasets.Value("string")) for c in RUN_COLUMNS})


def load_trace(directory: str | Path) -> Any:
    """A run directory as a ``datasets.DatasetDict`` with splits ``calls``, ``steps``,
    ``episodes`` and ``runs`` (typed by the column lists; needs the ``datasets`` package)."""
    import datasets

    t = read_trace(directory)
    out = {
        "calls": datasets.Dataset.from_list(
            [{c: r.get(c) for c in CALL_COLUMNS} for r in t["calls"]], features=_call_features()
        ),
        "steps": datasets.Dataset.from_list(
            [{c: r.get(c) for c in SCHEMA.names} for r in t["steps"]],
            features=datasets.Features.from_arrow_schema(SCHEMA),
        ),
        "episodes": datasets.Dataset.from_list(
            [{c: r.get(c) for c in EPISODE_COLUMNS} for r in t["episodes"]], features=_episode_features()
        ),
        "runs": datasets.Dataset.from_list(
            [{c: r.get(c) for c in RUN_COLUMNS} for r in t["runs"]], features=_run_features()
        ),
    }
    return datasets.DatasetDict(out)


def to_grpo(directory: str | Path, *, mode: str = "calls", require_tokens: bool = True) -> dict[str, list[Any]]:
    """The trace as the dict a TRL ``GRPOTrainer`` ``rollout_func`` returns (the shape
    :func:`openenv.trl.rollout_func` returns): ``prompt_ids``, ``completion_ids``, ``logprobs``,
    ``env_mask`` and ``env_reward`` (the episode's reward), plus ``episode_id`` and ``task_id``.

    ``mode="calls"``: one sample per model call (every call of an episode carries its reward).
    ``mode="episode"``: one sample per episode, its calls joined into one completion: the
    tokens each call's prompt adds after the previous call's prompt and completion (tool
    output, the harness's messages) go in with ``env_mask`` 0 and logprob 0.0; this needs each
    prompt to extend the previous one token for token, else ``ValueError`` names the call.
    Calls without token ids raise ``ValueError`` (``require_tokens``) or are skipped.
    """
    if mode not in ("calls", "episode"):
        raise ValueError("mode is 'calls' or 'episode'")
    t = read_trace(directory)
    rewards = {e["episode_id"]: float(e["reward"] or 0.0) for e in t["episodes"]}
    out: dict[str, list[Any]] = {
        k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "episode_id", "task_id")
    }
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for c in t["calls"]:
        if c["episode_id"] not in rewards or c.get("error"):
            continue  # calls of an episode that never finished, or failed calls: nothing to learn from
        if c.get("prompt_token_ids") is None or c.get("completion_token_ids") is None:
            if require_tokens:
                raise ValueError(f"call {c['episode_id']}#{c['call_index']} has no token ids (the upstream sent none)")
            continue
        by_episode.setdefault(c["episode_id"], []).append(c)
    for episode_id, calls in by_episode.items():
        calls.sort(key=lambda c: c["call_index"])
        reward = rewards[episode_id]
        samples: list[tuple[list[int], list[int], list[float], list[int]]] = []
        if mode == "calls":
            for c in calls:
                ids = list(c["completion_token_ids"])
                samples.append((list(c["prompt_token_ids"]), ids, _logprobs(c, len(ids)), [1] * len(ids)))
        else:
            prompt = list(calls[0]["prompt_token_ids"])
            ids, lps, mask = [], [], []
            seen = list(prompt)
            for c in calls:
                p = list(c["prompt_token_ids"])
                if p[: len(seen)] != seen:
                    raise ValueError(
                        f"call {episode_id}#{c['call_index']}: its prompt does not extend the previous one"
                    )
                added = p[len(seen) :]
                ids += added
                lps += [0.0] * len(added)
                mask += [0] * len(added)
                gen = list(c["completion_token_ids"])
                ids += gen
                lps += _logprobs(c, len(gen))
                mask += [1] * len(gen)
                seen = p + gen
            samples.append((prompt, ids, lps, mask))
        task = calls[0].get("task_id")
        for prompt_ids, completion_ids, logprobs, mask in samples:
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            out["env_reward"].append(reward)
            out["episode_id"].append(episode_id)
            out["task_id"].append(task)
    return out


def _logprobs(call: Mapping[str, Any], n: int) -> list[float]:
    lp = call.get("completion_logprobs")
    if lp is None or len(lp) != n:
        return [0.0] * n  # no logprobs from the upstream: the trainer recomputes them
    return [float(x) for x in lp]
