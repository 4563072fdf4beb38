"""JSON-like Python values <-> ``google.protobuf.Value`` / ``Struct``, the protocol's JSON.

Integral numbers come back as ``int`` (a ``Value`` stores every number as a double, exact
up to 2**53); numpy scalars and arrays, dataclasses and pydantic models go in as their JSON.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

__all__ = ["from_struct", "from_value", "to_struct", "to_value"]

_MAX_EXACT_INT = 2**53


def to_value(obj: Any, out: struct_pb2.Value | None = None) -> struct_pb2.Value:
    """Convert a JSON-like Python object into a ``google.protobuf.Value``."""
    v = struct_pb2.Value() if out is None else out
    t = type(obj)
    # Exact built-in types first (the hot path of every step); subclasses and the rest below.
    if t is dict:
        fields = v.struct_value.fields
        if not obj:
            v.struct_value.SetInParent()
        _fill(fields, obj)
    elif t is str:
        v.string_value = obj
    elif t is int or t is float:
        v.number_value = obj
    elif obj is None:
        v.null_value = struct_pb2.NULL_VALUE
    elif obj is True or obj is False:
        v.bool_value = obj
    elif t is list:
        lst = v.list_value
        lst.SetInParent()
        values = lst.values
        for x in obj:
            to_value(x, values.add())
    elif isinstance(obj, str):
        v.string_value = obj
    elif isinstance(obj, (int, float)):
        v.number_value = obj
    elif isinstance(obj, Mapping):
        fields = v.struct_value.fields
        if not obj:
            v.struct_value.SetInParent()
        for k, x in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"JSON object keys must be strings, got {type(k).__name__}")
            to_value(x, fields[k])
    elif isinstance(obj, (list, tuple)):
        lst = v.list_value
        lst.SetInParent()
        for x in obj:
            to_value(x, lst.values.add())
    elif (np := sys.modules.get("numpy")) is not None and isinstance(obj, np.generic | np.ndarray):
        # (no NumPy value exists before NumPy is imported: the runtime does not import it)
        to_value(obj.item() if isinstance(obj, np.generic) else obj.tolist(), v)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_value(dataclasses.asdict(obj), v)
    elif hasattr(obj, "model_dump"):
        to_value(obj.model_dump(mode="json"), v)
    else:
        raise TypeError(f"{type(obj).__name__} is not JSON-like")
    return v


def from_value(v: struct_pb2.Value) -> Any:
    """Convert a ``google.protobuf.Value`` into plain Python (integral numbers as int; objects'
    keys sorted, as :func:`from_struct`)."""
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        n = v.number_value
        if n.is_integer() and -_MAX_EXACT_INT <= n <= _MAX_EXACT_INT:
            return int(n)
        return n
    if kind == "struct_value":
        return _fields(v.struct_value.fields)
    if kind == "string_value":
        return v.string_value
    if kind == "list_value":
        return [from_value(x) for x in v.list_value.values]
    if kind == "bool_value":
        return v.bool_value
    return None


def to_struct(obj: Mapping[str, Any] | None, out: struct_pb2.Struct | None = None) -> struct_pb2.Struct:
    """Convert a mapping into a ``google.protobuf.Struct``."""
    s = struct_pb2.Struct() if out is None else out
    if obj:
        _fill(s.fields, obj)
    return s


def from_struct(s: struct_pb2.Struct) -> dict[str, Any]:
    """Convert a ``google.protobuf.Struct`` into a dict, its keys in sorted order (at any depth).

    A ``Struct``'s members have no order on the wire, and the order upb iterates them in
    differs from one process to the next; sorted, an observation or a tool's schema reads (and
    renders into a prompt) the same in every process and over every transport.
    """
    return _fields(s.fields)


# The fields of a JSON object, both ways, with its string and number members inlined: the
# actions, observations and metadata of most steps are flat objects of scalars, and a call of
# to_value/from_value per member was a third of their cost (measured: from_value of a two-member
# object 4.6 -> 2.6 us). Everything else recurses as before.


def _fill(fields: Any, obj: Mapping[Any, Any]) -> None:
    for k, x in obj.items():
        if type(k) is not str and not isinstance(k, str):
            raise TypeError(f"JSON object keys must be strings, got {type(k).__name__}")
        tx = type(x)
        if tx is str:
            fields[k].string_value = x
        elif tx is int or tx is float:
            fields[k].number_value = x
        else:
            to_value(x, fields[k])


def _fields(fields: Any) -> dict[str, Any]:
    # Keys then indexing: upb's map has no C items(); the ABC's items() costs 3x (measured).
    # Sorted: see from_struct (sorting two keys costs ~0.15 us of ~2 us, measured).
    out: dict[str, Any] = {}
    for k in sorted(fields):
        x = fields[k]
        kind = x.WhichOneof("kind")
        if kind == "number_value":
            n = x.number_value
            out[k] = int(n) if n.is_integer() and -_MAX_EXACT_INT <= n <= _MAX_EXACT_INT else n
        elif kind == "string_value":
            out[k] = x.string_value
        else:
            out[k] = from_value(x)
    return out
