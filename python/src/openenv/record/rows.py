"""The rollout record format: one row per time step, the same columns in JSONL and Parquet.

Columns:

``episode_id`` (str), ``episode_index`` (int), ``seed`` (int or null), ``task_id`` (str or null),
``step`` (0 for the reset, then 1, 2, ...), ``observation``, ``action`` (null on the reset row),
``reward`` (float or null: no reward is not 0), ``reward_breakdown`` (or null),
``terminated``, ``truncated``, ``final`` (the episode's last row: it ended, or the collector
stopped it at ``max_steps``), ``metadata``, ``timestamp`` (Unix seconds), ``duration_s``
(the request's round trip), ``policy`` (str), ``json_columns`` (list of str, see below).

Observation, action, reward breakdown and metadata vary in type with the environment. They are
stored as typed values (:func:`to_jsonable`: protobuf messages as ``{"@type": name, ...}`` with
every field, tensors as ``{"@tensor": {dtype, shape, data}}``, tool calls as dicts): in JSONL as
JSON values, in Parquet as nested types (structs, lists) inferred from the values, so
``datasets`` loads them as dicts and lists with no decode step. A Parquet column whose values
share no type (a string in one row, an object in another) is stored as JSON text instead, and
named in every row's ``json_columns``; :func:`decode_row` parses those (and every JSON column of
files written before typed columns, which have no ``json_columns``: :data:`SCHEMA`).
An empty metadata object is stored as null (Parquet has no struct of no fields).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import Message

from openenv.runtime.tools import CallToolAction, CallToolObservation, ToolResult

__all__ = ["COLUMNS", "JSON_COLUMNS", "SCHEMA", "decode_row", "table", "to_jsonable", "typed_row"]

SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("episode_index", pa.int64()),
        ("seed", pa.int64()),
        ("task_id", pa.string()),
        ("step", pa.int64()),
        ("observation", pa.string()),
        ("action", pa.string()),
        ("reward", pa.float64()),
        ("reward_breakdown", pa.string()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("final", pa.bool_()),
        ("metadata", pa.string()),
        ("timestamp", pa.float64()),
        ("duration_s", pa.float64()),
        ("policy", pa.string()),
    ]
)
"""The Arrow schema of record files written before typed columns (the four variable columns as
JSON text, no ``json_columns``); :func:`openenv.record.read_rows` still reads them."""

JSON_COLUMNS = ("observation", "action", "reward_breakdown", "metadata")
"""The columns whose type varies with the environment (JSON text in files of :data:`SCHEMA`)."""

COLUMNS = (*SCHEMA.names, "json_columns")
"""The columns of a record file, in order."""

_FIXED = {f.name: f.type for f in SCHEMA if f.name not in JSON_COLUMNS}


def to_jsonable(value: Any) -> Any:
    """A JSON-able form of an observation or action as :class:`openenv.EnvClient` handles them:
    protobuf messages as ``{"@type": name, ...proto3 JSON...}``, arrays as
    ``{"@tensor": {"dtype", "shape", "data"}}``, tool actions/observations as dicts."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Message):
        # Every field, defaults included: the rows of one message type then share one shape
        # (one Parquet struct), as its schema says.
        return {
            "@type": value.DESCRIPTOR.full_name,
            **json_format.MessageToDict(
                value, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            ),
        }
    if isinstance(value, np.ndarray):
        return {"@tensor": {"dtype": str(value.dtype), "shape": list(value.shape), "data": value.tolist()}}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, CallToolAction):
        return {"tool_name": value.tool_name, "arguments": to_jsonable(value.arguments)}
    if isinstance(value, CallToolObservation):
        return {"tool_name": value.tool_name, "result": to_jsonable(value.result)}
    if isinstance(value, ToolResult):
        return {
            "content": to_jsonable(value.content),
            "structured_content": to_jsonable(value.structured_content),
            "is_error": value.is_error,
        }
    if isinstance(value, (bytes, bytearray)):
        return {"@bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_jsonable(dump(mode="json"))
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True, allow_nan=True)


def decode_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its JSON-text columns parsed back into Python values: those its
    ``json_columns`` names, or, in a file written before typed columns, all of
    :data:`JSON_COLUMNS`. Typed values are returned as they are (an empty metadata as ``{}``)."""
    out = dict(row)
    typed = "json_columns" in out
    for c in (out.get("json_columns") or ()) if typed else JSON_COLUMNS:
        if isinstance(out.get(c), str):
            out[c] = json.loads(out[c])
    if typed and out.get("metadata") is None:
        out["metadata"] = {}
    return out


def typed_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of any vintage with its variable columns as values (what :func:`table` takes)."""
    out = decode_row(row)
    out["json_columns"] = []
    out["metadata"] = out.get("metadata") or None  # {} is stored as null (see above)
    return {c: out.get(c) for c in COLUMNS}


def _has_empty_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return t.num_fields == 0 or any(_has_empty_struct(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_empty_struct(t.value_type)
    return False


def table(rows: list[dict[str, Any]]) -> pa.Table:
    """Typed rows (:func:`typed_row`) as an Arrow table: the variable columns typed by
    inference over every row (nested structs and lists), or JSON text where the values share
    no type (then named in ``json_columns``)."""
    arrays: dict[str, pa.Array] = {}
    as_text: list[str] = []
    for c in JSON_COLUMNS:
        values = [r.get(c) for r in rows]
        if c == "metadata":
            values = [v or None for v in values]
        try:
            arr = pa.array(values)
            if _has_empty_struct(arr.type):
                raise ValueError("a struct of no fields")
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            arr = pa.array([None if v is None else dumps_value(v) for v in values], pa.string())
            as_text.append(c)
        arrays[c] = arr
    for c, t in _FIXED.items():
        arrays[c] = pa.array([r.get(c) for r in rows], t)
    arrays["json_columns"] = pa.array([as_text] * len(rows), pa.list_(pa.string()))
    return pa.table({c: arrays[c] for c in COLUMNS})


def dumps_value(value: Any) -> str:
    """JSON text of a value already JSON-able."""
    return json.dumps(value, sort_keys=True, allow_nan=True)
