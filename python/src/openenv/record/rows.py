"""The rollout record format: one row per time step, the same in JSONL and Parquet.

Every value that varies in type with the environment (observation, action, reward breakdown,
metadata) is stored as JSON text (:func:`to_jsonable`, then ``json.dumps``), so both files hold
the same strings and reload losslessly; :func:`decode_row` turns them back into Python values.

Columns (:data:`SCHEMA`):

``episode_id`` (str), ``episode_index`` (int), ``seed`` (int or null), ``task_id`` (str or null),
``step`` (0 for the reset, then 1, 2, ...), ``observation`` (JSON), ``action`` (JSON, null on the
reset row), ``reward`` (float or null: no reward is not 0), ``reward_breakdown`` (JSON or null),
``terminated``, ``truncated``, ``final`` (the episode's last row: it ended, or the collector
stopped it at ``max_steps``), ``metadata`` (JSON), ``timestamp`` (Unix seconds), ``duration_s``
(the request's round trip), ``policy`` (str).
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

__all__ = ["JSON_COLUMNS", "SCHEMA", "decode_row", "to_jsonable"]

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
"""The Arrow schema of a record file (the Parquet file's, and the JSONL rows' keys)."""

JSON_COLUMNS = ("observation", "action", "reward_breakdown", "metadata")
"""Columns holding JSON text."""


def to_jsonable(value: Any) -> Any:
    """A JSON-able form of an observation or action as :class:`openenv.EnvClient` handles them:
    protobuf messages as ``{"@type": name, ...proto3 JSON...}``, arrays as
    ``{"@tensor": {"dtype", "shape", "data"}}``, tool actions/observations as dicts."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Message):
        return {
            "@type": value.DESCRIPTOR.full_name,
            **json_format.MessageToDict(value, preserving_proto_field_name=True),
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
    """A row with its JSON columns parsed back into Python values."""
    out = dict(row)
    for c in JSON_COLUMNS:
        if out.get(c) is not None:
            out[c] = json.loads(out[c])
    return out
