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
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf import json_format, struct_pb2

from openenv.record.rows import SCHEMA
from openenv.v1 import trace_pb2

__all__ = [
    "CALL_COLUMNS",
    "EPISODE_COLUMNS",
    "JSON_CALL_COLUMNS",
    "RUN_COLUMNS",
    "TRAINING_PARQUET_COLUMNS",
    "TraceWriter",
    "UntrainableTrace",
    "decode_call",
    "export_training",
    "load_trace",
    "read_trace",
    "read_training_traces",
    "to_grpo",
    "training_traces",
    "validate_training_trace",
    "write_training_traces",
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


# ---------------------------------------------------------------------------------------------
# Training traces (RFC 0017): a run directory's episodes as openenv.v1.TrainingTrace messages.

TRAINING_SCHEMA_VERSION = 1
"""The :class:`openenv.v1.trace_pb2.TrainingTrace` ``schema_version`` this module writes."""

SAMPLING_KEYS = (
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "max_output_tokens",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "stop", "n",
)  # fmt: skip
"""Request fields recorded as a turn's ``sampling`` (those present in what the server received)."""


class UntrainableTrace(ValueError):
    """A trace that cannot be a training trace as asked: a call without the server's token ids
    (and text-only traces were not allowed), or a message whose token fields break the contract
    (misaligned logprobs, a loss mask that does not cover the tokens or trains a prompt token)."""


def _struct(value: Any) -> Any:
    s = struct_pb2.Struct()
    if isinstance(value, Mapping):
        s.update(json.loads(json.dumps(value, default=str)))
    return s


def _loads(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return None
    return text


def _tool_calls(api: str, response: Any) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    if not isinstance(response, Mapping):
        return out
    if api == "chat.completions":
        choices = response.get("choices") or []
        msg = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
        for tc in (msg or {}).get("tool_calls") or []:
            if isinstance(tc, Mapping):
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                out.append(
                    (
                        str(tc.get("id") or ""),
                        str(fn.get("name") or ""),
                        args if isinstance(args, str) else json.dumps(args),
                    )
                )
    else:
        for item in response.get("output") or []:
            if isinstance(item, Mapping) and item.get("type") in ("function_call", "custom_tool_call"):
                args = item.get("arguments", item.get("input"))
                out.append((str(item.get("call_id") or item.get("id") or ""), str(item.get("name") or ""),
                            args if isinstance(args, str) else json.dumps(args)))  # fmt: skip
    return out


def _observation_text(obs: Any) -> str:
    if isinstance(obs, str):
        return obs
    if isinstance(obs, Mapping):
        result = obs.get("result")
        if isinstance(result, Mapping):
            texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, Mapping)]
            if texts:
                return "\n".join(str(t) for t in texts)
    return "" if obs is None else json.dumps(obs, default=str)


def _turn(call: Mapping[str, Any], *, text_only: bool) -> Any:
    request = _loads(call.get("request")) or {}
    injected = _loads(call.get("injected")) or {}
    response = _loads(call.get("response"))
    sent = {**request, **injected} if isinstance(request, Mapping) else dict(injected)
    turn = trace_pb2.TrainingTurn(
        call_index=int(call.get("call_index") or 0), api=str(call.get("api") or ""),
        request=_struct(request), injected=_struct(injected),
        response=_struct(response if isinstance(response, Mapping) else {}),
        sampling=_struct({k: sent[k] for k in SAMPLING_KEYS if sent.get(k) is not None}),
        status=int(call.get("status") or 0), started_at=float(call.get("started_at") or 0.0),
        ttft_s=float(call.get("ttft_s") or 0.0), duration_s=float(call.get("duration_s") or 0.0),
    )  # fmt: skip
    for cid, name, args in _tool_calls(turn.api, response):
        turn.tool_calls.add(id=cid, name=name, arguments=args)
    if text_only:
        return turn
    prompt, ids = list(call["prompt_token_ids"]), list(call["completion_token_ids"])
    lps = call.get("completion_logprobs")
    turn.prompt_token_ids.extend(prompt)
    turn.completion_token_ids.extend(ids)
    if isinstance(lps, list) and len(lps) == len(ids):
        turn.per_token_logps.extend(float(x) for x in lps)
        turn.loss_mask.extend([0] * len(prompt) + [1] * len(ids))
    else:
        # Tokens without their sampler's logprobs stay as context: training them against a guessed
        # logprob (0.0 is p = 1) would bias every importance ratio of the update.
        turn.per_token_logps.extend([0.0] * len(ids))
        turn.loss_mask.extend([0] * (len(prompt) + len(ids)))
    return turn


def _steps(rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    out = []
    for r in sorted(rows, key=lambda r: int(r.get("step") or 0)):
        action = _loads(r.get("action"))
        args = struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)  # the reset's: no arguments
        tool = ""
        if isinstance(action, Mapping):
            tool = str(action.get("tool_name") or action.get("name") or "")
            json_format_value = action.get("arguments")
            if json_format_value is not None:
                json_format.ParseDict(json.loads(json.dumps(json_format_value, default=str)), args)
        reward = r.get("reward")
        out.append(
            trace_pb2.TraceStep(
                index=int(r.get("step") or 0),
                tool=tool,
                arguments=args,
                result=_observation_text(_loads(r.get("observation"))),
                reward=float(reward or 0.0),
                terminated=bool(r.get("terminated")),
                truncated=bool(r.get("truncated")),
            )
        )
    return out


def validate_training_trace(trace: Any) -> None:
    """Check a :class:`openenv.v1.trace_pb2.TrainingTrace` against RFC 0017; raise
    :class:`UntrainableTrace` naming the first turn that breaks it.

    With ``token_source`` UPSTREAM every turn has one logprob per completion token and one mask
    entry per prompt and completion token, 0 or 1, 0 on every prompt position. With NONE (or
    unspecified) no turn carries a token field at all: a text-only trace never poses as a
    trainable one."""
    if trace.schema_version != TRAINING_SCHEMA_VERSION:
        raise UntrainableTrace(f"schema_version {trace.schema_version} (this reader knows {TRAINING_SCHEMA_VERSION})")
    where = f"episode {trace.episode_id or '?'}"
    for t in trace.turns:
        name = f"{where} call {t.call_index}"
        fields = (t.prompt_token_ids, t.completion_token_ids, t.per_token_logps, t.loss_mask)
        if trace.token_source != trace_pb2.TOKEN_SOURCE_UPSTREAM:
            if any(len(f) for f in fields):
                raise UntrainableTrace(f"{name}: token fields in a trace whose token_source is not UPSTREAM")
            continue
        if not t.completion_token_ids:
            raise UntrainableTrace(f"{name}: no completion token ids")
        if len(t.per_token_logps) != len(t.completion_token_ids):
            raise UntrainableTrace(
                f"{name}: {len(t.per_token_logps)} logprobs for {len(t.completion_token_ids)} completion tokens"
            )
        if len(t.loss_mask) != len(t.prompt_token_ids) + len(t.completion_token_ids):
            raise UntrainableTrace(f"{name}: the loss mask must cover the prompt and the completion")
        if any(m not in (0, 1) for m in t.loss_mask):
            raise UntrainableTrace(f"{name}: the loss mask holds a value other than 0 and 1")
        if any(t.loss_mask[: len(t.prompt_token_ids)]):
            raise UntrainableTrace(f"{name}: the loss mask trains a prompt token")
        if any(not math.isfinite(x) or x > 0.0 for x in t.per_token_logps):
            raise UntrainableTrace(f"{name}: a logprob is not a finite number <= 0")


def training_traces(directory: str | Path, *, allow_text: bool = False) -> list[Any]:
    """The episodes of a run directory as :class:`openenv.v1.trace_pb2.TrainingTrace` messages
    (RFC 0017), in episode order, each validated (:func:`validate_training_trace`).

    A turn is each model call that succeeded (failed calls have no completion to learn from).
    The tokens are the model server's (``--request-tokens``); the episode's ``reward`` is the
    environment's (``episodes.jsonl``; unset for an episode that errored). An episode with a call
    that has no token ids raises :class:`UntrainableTrace` naming it, unless ``allow_text``: its
    trace is then written with ``token_source`` NONE and no token field at all (SFT on the text);
    the text is never retokenised into ids the model did not sample. An episode's turns are the
    calls of the environment session its row names (a resumed ``openenv collect`` replays an
    interrupted episode in a new session)."""
    t = read_trace(directory)
    calls: dict[str, list[dict[str, Any]]] = {}
    for c in t["calls"]:
        if c.get("error") or int(c.get("status") or 0) >= 400:
            continue
        calls.setdefault(str(c["episode_id"]), []).append(c)
    steps: dict[str, list[dict[str, Any]]] = {}
    for s in t["steps"]:
        steps.setdefault(str(s.get("episode_id")), []).append(s)
    runs = {r["run_id"]: r for r in t["runs"]}
    episodes = {str(e["episode_id"]): e for e in t["episodes"]}  # a replayed episode: its last row
    out = []
    for eid, e in sorted(episodes.items()):
        # The calls of the session that played the episode (an interrupted attempt of a resumed
        # collection left calls under the same episode id, in another session).
        mine = sorted(
            (c for c in calls.get(eid, []) if not e.get("session_id") or c.get("session_id") == e["session_id"]),
            key=lambda c: int(c["call_index"]),
        )
        missing = [c for c in mine if c.get("prompt_token_ids") is None or c.get("completion_token_ids") is None]
        if missing and not allow_text:
            raise UntrainableTrace(
                f"episode {eid} call {missing[0]['call_index']} has no token ids: the model server returned none "
                "(run with --request-tokens against a server that returns them, or allow text-only traces)"
            )
        text_only = bool(missing) or not mine
        msg = trace_pb2.TrainingTrace(
            schema_version=TRAINING_SCHEMA_VERSION, run_id=str(e.get("run_id") or ""), episode_id=eid,
            session_id=str(e.get("session_id") or ""), task_id=str(e.get("task_id") or ""),
            agent=str(e.get("agent") or ""), model=str(runs.get(e.get("run_id"), {}).get("model") or ""),
            token_source=trace_pb2.TOKEN_SOURCE_NONE if text_only else trace_pb2.TOKEN_SOURCE_UPSTREAM,
            solved=bool(e.get("solved")), status=str(e.get("status") or ""), error=str(e.get("error") or ""),
            started_at=float(e.get("started_at") or 0.0), duration_s=float(e.get("duration_s") or 0.0),
        )  # fmt: skip
        if e.get("status") != "error" and e.get("reward") is not None:
            msg.reward = float(e["reward"])
        msg.turns.extend(_turn(c, text_only=text_only) for c in mine)
        msg.steps.extend(_steps(steps.get(eid, [])))
        validate_training_trace(msg)
        out.append(msg)
    return out


TRAINING_PARQUET_COLUMNS = (
    "schema_version", "run_id", "episode_id", "session_id", "task_id", "agent", "model", "token_source", "reward",
    "solved", "status", "error", "started_at", "duration_s", "turns", "steps",
)  # fmt: skip
"""The columns of a training-trace Parquet file: one row per episode, ``turns`` and ``steps`` as
lists of structs, the free-form fields (``request``, ``injected``, ``response``, ``sampling``,
a step's ``arguments``) as JSON text."""


def _parquet_schema() -> Any:
    turn = pa.struct(
        [
            ("call_index", pa.int64()), ("api", pa.string()), ("request", pa.string()), ("injected", pa.string()),
            ("response", pa.string()), ("sampling", pa.string()), ("prompt_token_ids", pa.list_(pa.int64())),
            ("completion_token_ids", pa.list_(pa.int64())), ("per_token_logps", pa.list_(pa.float64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("tool_calls", pa.list_(pa.struct([("id", pa.string()), ("name", pa.string()),
                                               ("arguments", pa.string())]))),
            ("status", pa.int64()), ("started_at", pa.float64()), ("ttft_s", pa.float64()),
            ("duration_s", pa.float64()),
        ]
    )  # fmt: skip
    step = pa.struct(
        [
            ("index", pa.int64()), ("tool", pa.string()), ("arguments", pa.string()), ("result", pa.string()),
            ("reward", pa.float64()), ("terminated", pa.bool_()), ("truncated", pa.bool_()),
        ]
    )  # fmt: skip
    kinds = {
        "schema_version": pa.int64(), "token_source": pa.string(), "reward": pa.float64(), "solved": pa.bool_(),
        "started_at": pa.float64(), "duration_s": pa.float64(), "turns": pa.list_(turn), "steps": pa.list_(step),
    }  # fmt: skip
    return pa.schema([(c, kinds.get(c, pa.string())) for c in TRAINING_PARQUET_COLUMNS])


_FREE_TURN = ("request", "injected", "response", "sampling")


def _to_dict(trace: Any) -> dict[str, Any]:
    return json_format.MessageToDict(trace, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def _parquet_row(trace: Any) -> dict[str, Any]:
    d = _to_dict(trace)
    row = {c: d.get(c) for c in TRAINING_PARQUET_COLUMNS}
    row["reward"] = trace.reward if trace.HasField("reward") else None
    row["turns"] = [{**t, **{k: json.dumps(t.get(k) or {}) for k in _FREE_TURN}} for t in d.get("turns", [])]
    row["steps"] = [{**s, "arguments": json.dumps(s.get("arguments"))} for s in d.get("steps", [])]
    return row


def write_training_traces(traces: Iterable[Any], path: str | Path) -> Path:
    """Write :class:`~openenv.v1.trace_pb2.TrainingTrace` messages to ``path``: ``.jsonl`` (one
    message per line, proto3 JSON with the proto's field names) or ``.parquet``
    (:data:`TRAINING_PARQUET_COLUMNS`, one row per episode). Each is validated first; nothing is
    written when one fails."""
    path = Path(path)
    items = list(traces)
    for t in items:
        validate_training_trace(t)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        text = "".join(json.dumps(_to_dict(t), ensure_ascii=False) + "\n" for t in items)
        path.write_text(text, encoding="utf-8")
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist([_parquet_row(t) for t in items], schema=_parquet_schema()), path)
    else:
        raise ValueError(f"{path}: a training-trace file ends in .jsonl or .parquet")
    return path


def read_training_traces(path: str | Path) -> list[Any]:
    """The :class:`~openenv.v1.trace_pb2.TrainingTrace` messages of a file
    :func:`write_training_traces` wrote (``.jsonl`` or ``.parquet``), each validated."""
    path = Path(path)
    dicts: list[dict[str, Any]] = []
    if path.suffix == ".jsonl":
        dicts = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif path.suffix == ".parquet":
        for row in pq.read_table(path).to_pylist():
            row["turns"] = [{**t, **{k: json.loads(t[k]) for k in _FREE_TURN}} for t in row.get("turns") or []]
            row["steps"] = [{**s, "arguments": json.loads(s["arguments"])} for s in row.get("steps") or []]
            if row.get("reward") is None:
                row.pop("reward", None)
            dicts.append(row)
    else:
        raise ValueError(f"{path}: a training-trace file ends in .jsonl or .parquet")
    out = []
    for d in dicts:
        msg = json_format.ParseDict(d, trace_pb2.TrainingTrace())
        validate_training_trace(msg)
        out.append(msg)
    return out


def export_training(directory: str | Path, path: str | Path, *, allow_text: bool = False) -> Path:
    """:func:`training_traces` of a run directory written to ``path`` (``.jsonl`` or ``.parquet``)."""
    return write_training_traces(training_traces(directory, allow_text=allow_text), path)
