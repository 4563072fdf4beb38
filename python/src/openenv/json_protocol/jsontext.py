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

__all__ = ["dumpb", "dumps", "least_size", "loads"]

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


def dumpb(obj: Any) -> bytes:
    """:func:`dumps` as UTF-8 bytes (what goes on the wire, without a copy as ``str``)."""
    return orjson.dumps(obj, default=_default, option=_OPTS)


def least_size(obj: Any, stop: int, max_items: int = 256) -> int:
    """A lower bound of the size of ``obj``'s JSON text (or protobuf encoding): the lengths of
    its strings and bytes, keys included, summed until they exceed ``stop`` or ``max_items``
    values have been looked at (a fine-grained value is not walked: its bound stays low).
    Cheap where a reply would be large for few values, e.g. a tool's text result, which
    travels as text, structured content and data: a reply over the message limit is then
    known before it is encoded."""
    n, todo, seen = 0, [obj], 0
    while todo and n <= stop and seen < max_items:
        v = todo.pop()
        seen += 1
        t = type(v)
        if t is str or t is bytes:
            n += len(v)
        elif t is dict:
            n += sum(len(k) for k in v if type(k) is str)
            todo.extend(v.values())
        elif t is list or t is tuple:
            todo.extend(v)
    return n


loads = orjson.loads
"""Parse JSON text or bytes (``orjson.JSONDecodeError`` is a ``ValueError``)."""
