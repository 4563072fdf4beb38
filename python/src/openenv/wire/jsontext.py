"""JSON text for the JSON transports: orjson, with the types environments return.

orjson is ~10x the standard library on the frames the bridge and the WebSocket client write
per step; numpy arrays and scalars, dataclasses, pydantic models, sets and tuples, bytes
(base64) and protobuf messages (their canonical JSON) are accepted.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

__all__ = ["dumps", "loads"]

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode()
    if isinstance(obj, Message):
        return json_format.MessageToDict(obj, preserving_proto_field_name=True)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def dumps(obj: Any) -> str:
    """Compact JSON text (numpy arrays, dataclasses and pydantic models allowed)."""
    return orjson.dumps(obj, default=_default, option=_OPTS).decode()


loads = orjson.loads
"""Parse JSON text or bytes (``orjson.JSONDecodeError`` is a ``ValueError``)."""
