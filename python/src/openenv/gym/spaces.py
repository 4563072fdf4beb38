"""Gymnasium spaces from the protocol's TypeSpecs, with the conversions both ways.

:func:`converter` maps one advertised ``TypeSpec`` (``EnvironmentInfo.action`` /
``.observation``) to a :class:`Converter`: its ``space`` and the two translations between what
:class:`openenv.EnvClient` decodes/encodes and what Gymnasium code holds.

The mapping (a type that fits none of it raises :class:`SpaceError`, naming the part):

========================================  =============================================
TypeSpec                                  Space
========================================  =============================================
tensor (fixed shape)                      ``Box(dtype, shape, minimum..maximum)``;
                                          bool tensors ``MultiBinary(shape)``
JSON ``enum``                             ``Discrete(len(enum))`` (index <-> value)
JSON boolean                              ``Discrete(2)``
JSON integer with both bounds             ``Discrete(max - min + 1, start=min)``
JSON integer / number                     ``Box`` of shape ``()`` (int64 / float64)
JSON string                               ``Text`` (``maxLength``, printable characters)
JSON array of fixed length of numbers     ``Box`` of shape ``(n,)``; arrays of such arrays
                                          (every level of fixed length) ``Box`` of shape
                                          ``(n, m, ...)``
JSON array                                ``Sequence(items)``
JSON object with properties               ``Dict`` of its properties
message                                   ``Dict`` of its fields (enums ``Discrete`` of their
                                          values but a ``*_UNSPECIFIED`` zero, bools
                                          ``Discrete(2)``, numbers ``Box`` ``()``, strings
                                          ``Text``, repeated fields ``Sequence``); a message
                                          of exactly one field is that field's space
========================================  =============================================
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from google.protobuf import descriptor, descriptor_pb2
from google.protobuf.message import Message

from openenv.runtime.codec import message_class
from openenv.v1 import payload_pb2
from openenv.values import from_struct

__all__ = ["CHARSET", "Converter", "SpaceError", "converter"]

CHARSET = string.printable
"""The characters of every ``Text`` space (printable ASCII and whitespace)."""

DEFAULT_MAX_TEXT = 4096
"""``Text.max_length`` of strings whose schema sets no ``maxLength``."""

_MAX_DISCRETE = 1 << 16  # integer ranges wider than this become a Box, not a Discrete

_DTYPES = {
    payload_pb2.D_TYPE_BOOL: np.bool_,
    payload_pb2.D_TYPE_INT8: np.int8,
    payload_pb2.D_TYPE_UINT8: np.uint8,
    payload_pb2.D_TYPE_INT16: np.int16,
    payload_pb2.D_TYPE_UINT16: np.uint16,
    payload_pb2.D_TYPE_INT32: np.int32,
    payload_pb2.D_TYPE_UINT32: np.uint32,
    payload_pb2.D_TYPE_INT64: np.int64,
    payload_pb2.D_TYPE_UINT64: np.uint64,
    payload_pb2.D_TYPE_FLOAT16: np.float16,
    payload_pb2.D_TYPE_FLOAT32: np.float32,
    payload_pb2.D_TYPE_FLOAT64: np.float64,
}

_FD = descriptor.FieldDescriptor
_FIELD_DTYPES = {
    _FD.TYPE_INT32: np.int32,
    _FD.TYPE_SINT32: np.int32,
    _FD.TYPE_SFIXED32: np.int32,
    _FD.TYPE_UINT32: np.uint32,
    _FD.TYPE_FIXED32: np.uint32,
    _FD.TYPE_INT64: np.int64,
    _FD.TYPE_SINT64: np.int64,
    _FD.TYPE_SFIXED64: np.int64,
    _FD.TYPE_UINT64: np.uint64,
    _FD.TYPE_FIXED64: np.uint64,
    _FD.TYPE_FLOAT: np.float32,
    _FD.TYPE_DOUBLE: np.float64,
}


class SpaceError(ValueError):
    """A TypeSpec (or a part of it) that no Gymnasium space represents."""


class Converter:
    """A space and the translations of one declared type.

    ``to_gym(value)``: a value as :class:`openenv.EnvClient` decodes it (JSON-like data, a NumPy
    array, a protobuf message) -> an element of ``space``. ``from_gym(x)``: an element of
    ``space`` -> a value the client encodes (the action to send).
    """

    def __init__(self, space: gym.Space[Any], to_gym: Callable[[Any], Any], from_gym: Callable[[Any], Any]) -> None:
        self.space, self.to_gym, self.from_gym = space, to_gym, from_gym


def _scalar_box(dtype: Any, low: float | None = None, high: float | None = None) -> Converter:
    dt = np.dtype(dtype)
    lo: float
    hi: float
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dtype)
        lo = info.min if low is None else max(int(low), info.min)
        hi = info.max if high is None else min(int(high), info.max)
    else:
        lo = -np.inf if low is None else low
        hi = np.inf if high is None else high
    space = gym.spaces.Box(low=np.array(lo, dtype=dt), high=np.array(hi, dtype=dt), shape=(), dtype=dt)
    return Converter(space, lambda v: np.asarray(v, dtype=dt), lambda x: np.asarray(x).item())


def _text(max_length: int | None = None, min_length: int | None = None) -> Converter:
    space = gym.spaces.Text(max_length=max_length or DEFAULT_MAX_TEXT, min_length=min_length or 0, charset=CHARSET)
    return Converter(space, str, str)


def _discrete_values(values: list[Any]) -> Converter:
    index = {repr(v): i for i, v in enumerate(values)}

    def to_gym(v: Any) -> int:
        i = index.get(repr(v))
        if i is None:
            raise ValueError(f"{v!r} is not one of {values!r}")
        return i

    return Converter(gym.spaces.Discrete(len(values)), to_gym, lambda x: values[int(x)])


def _boolean() -> Converter:
    return Converter(gym.spaces.Discrete(2), lambda v: int(bool(v)), lambda x: bool(int(x)))


def _sequence(item: Converter) -> Converter:
    return Converter(
        gym.spaces.Sequence(item.space, stack=False),
        lambda v: tuple(item.to_gym(e) for e in v),
        lambda x: [item.from_gym(e) for e in x],
    )


def _dict(parts: dict[str, Converter], where: str) -> Converter:
    def to_gym(v: Mapping[str, Any]) -> dict[str, Any]:
        missing = [k for k in parts if k not in v]
        if missing:
            raise ValueError(f"{where}: value lacks {', '.join(missing)}")
        return {k: c.to_gym(v[k]) for k, c in parts.items()}

    space = gym.spaces.Dict({k: c.space for k, c in parts.items()})
    return Converter(space, to_gym, lambda x: {k: c.from_gym(x[k]) for k, c in parts.items()})


# ------------------------------------------------------------------------------ tensors


def _tensor(spec: payload_pb2.TensorSpec) -> Converter:
    dt = _DTYPES.get(spec.dtype)
    if dt is None:
        raise SpaceError("a tensor TypeSpec without a dtype has no space")
    shape = tuple(int(d) for d in spec.shape)
    if any(d < 0 for d in shape):
        raise SpaceError(f"a tensor of variable shape {list(shape)} has no Box space (every extent must be fixed)")
    if dt is np.bool_:
        return Converter(
            gym.spaces.MultiBinary(list(shape) or [1]),
            lambda v: np.asarray(v, dtype=np.int8).reshape(shape or (1,)),
            lambda x: np.asarray(x, dtype=np.bool_).reshape(shape),
        )
    dtype = np.dtype(dt)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dt)
        ilo = info.min if not spec.HasField("minimum") else max(info.min, int(spec.minimum))
        ihi = info.max if not spec.HasField("maximum") else min(info.max, int(spec.maximum))
        low, high = np.full(shape, ilo, dtype=dtype), np.full(shape, ihi, dtype=dtype)
    else:
        low = np.full(shape, spec.minimum if spec.HasField("minimum") else -np.inf, dtype=dtype)
        high = np.full(shape, spec.maximum if spec.HasField("maximum") else np.inf, dtype=dtype)
    space = gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    return Converter(space, lambda v: np.asarray(v, dtype=dtype).reshape(shape), lambda x: np.asarray(x, dtype=dtype))


# ------------------------------------------------------------------------------ JSON Schema


def _fixed_shape(s: Mapping[str, Any]) -> tuple[tuple[int, ...], Mapping[str, Any]] | None:
    """The shape and item schema of a JSON array of fixed length of numbers, or of such arrays
    (every level of fixed length: a board of rows); None for any other array."""
    n, m = s.get("minItems"), s.get("maxItems")
    items = s.get("items")
    if s.get("type") != "array" or n is None or n != m or not isinstance(items, Mapping) or "enum" in items:
        return None
    if items.get("type") in ("number", "integer"):
        return (int(n),), items
    inner = _fixed_shape(items)
    return None if inner is None else ((int(n), *inner[0]), inner[1])


def _fixed_array(shape: tuple[int, ...], items: Mapping[str, Any]) -> Converter:
    """A JSON array of exactly ``n`` numbers (or integers), or nested such arrays, as a Box of that shape."""
    lo, hi = items.get("minimum"), items.get("maximum")
    space: gym.spaces.Box
    if items.get("type") == "number":
        low = np.full(shape, -np.inf if lo is None else lo)
        high = np.full(shape, np.inf if hi is None else hi)
        space = gym.spaces.Box(low=low, high=high, shape=shape, dtype=np.float64)
    else:
        info = np.iinfo(np.int64)
        space = gym.spaces.Box(
            low=info.min if lo is None else int(lo),
            high=info.max if hi is None else int(hi),
            shape=shape,
            dtype=np.int64,
        )
    dtype = space.dtype
    return Converter(space, lambda v: np.asarray(v, dtype=dtype), lambda x: np.asarray(x).tolist())


def _schema(s: Mapping[str, Any], root: Mapping[str, Any], where: str) -> Converter:
    ref = s.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/"):
            raise SpaceError(f"{where}: only local $refs map to spaces, not {ref!r}")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return _schema(target, root, where)
    if "enum" in s:
        return _discrete_values(list(s["enum"]))
    if "const" in s:
        return _discrete_values([s["const"]])
    t = s.get("type")
    if t == "boolean":
        return _boolean()
    if t == "integer":
        lo, hi = s.get("minimum"), s.get("maximum")
        if lo is not None and hi is not None and 0 <= hi - lo < _MAX_DISCRETE:
            lo = int(lo)
            return Converter(gym.spaces.Discrete(int(hi) - lo + 1, start=lo), int, int)
        return _scalar_box(np.int64, lo, hi)
    if t == "number":
        return _scalar_box(np.float64, s.get("minimum"), s.get("maximum"))
    if t == "string":
        return _text(s.get("maxLength"), s.get("minLength"))
    if t == "array":
        items = s.get("items")
        if not isinstance(items, Mapping):
            raise SpaceError(f"{where}: an array without an items schema has no space")
        fixed = _fixed_shape(s)
        if fixed is not None:
            return _fixed_array(*fixed)
        return _sequence(_schema(items, root, f"{where}[]"))
    if t == "object" or "properties" in s:
        props = s.get("properties")
        if not isinstance(props, Mapping) or not props:
            raise SpaceError(f"{where}: an object without declared properties has no Dict space")
        return _dict({k: _schema(v, root, f"{where}.{k}") for k, v in props.items()}, where)
    raise SpaceError(
        f"{where}: the JSON Schema {dict(s)!r} maps to no Gymnasium space "
        "(declare a type: enum, boolean, integer, number, string, array or object with properties)"
    )


# ------------------------------------------------------------------------------ messages


def _field(f: descriptor.FieldDescriptor, where: str) -> Converter:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        raise SpaceError(f"{where}.{f.name}: map fields have no space")
    if f.type == _FD.TYPE_ENUM and f.enum_type is not None:
        values = [v.number for v in f.enum_type.values if not (v.number == 0 and v.name.endswith("_UNSPECIFIED"))]
        c = _discrete_values(values)
    elif f.type == _FD.TYPE_BOOL:
        c = _boolean()
    elif f.type in _FIELD_DTYPES:
        c = _scalar_box(_FIELD_DTYPES[f.type])
    elif f.type == _FD.TYPE_STRING:
        c = _text()
    elif f.type == _FD.TYPE_MESSAGE and f.message_type is not None:
        c = _message(f.message_type, f"{where}.{f.name}", unwrap=False)
    else:
        raise SpaceError(f"{where}.{f.name}: fields of type bytes have no space")
    if f.is_repeated:
        c = _sequence(c)
    return c


def _message(d: descriptor.Descriptor, where: str, *, unwrap: bool) -> Converter:
    if d.full_name.startswith("google.protobuf."):
        raise SpaceError(f"{where}: well-known type {d.full_name} has no space")
    cls = message_class(_file_set(d), d.full_name)
    parts = {f.name: _field(f, where) for f in d.fields}
    if not parts:
        raise SpaceError(f"{where}: message {d.full_name} has no fields")

    def build(values: Mapping[str, Any]) -> Message:
        msg = cls()
        for name, v in values.items():
            field = getattr(msg, name)
            if isinstance(field, Message):
                field.CopyFrom(v)
            elif hasattr(field, "extend"):
                field.extend(v)
            else:
                setattr(msg, name, v)
        return msg

    def read(msg: Message) -> dict[str, Any]:
        return {k: getattr(msg, k) for k in parts}

    if unwrap and len(parts) == 1:
        ((name, only),) = parts.items()
        return Converter(only.space, lambda m: only.to_gym(getattr(m, name)), lambda x: build({name: only.from_gym(x)}))
    inner = _dict(parts, where)
    return Converter(inner.space, lambda m: inner.to_gym(read(m)), lambda x: build(inner.from_gym(x)))


def _file_set(d: descriptor.Descriptor) -> descriptor_pb2.FileDescriptorSet:
    """The files defining ``d`` (dependencies first), for :func:`message_class`."""
    out = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(f: descriptor.FileDescriptor) -> None:
        if f.name in seen:
            return
        seen.add(f.name)
        for dep in f.dependencies:
            add(dep)
        f.CopyToProto(out.file.add())

    add(d.file)
    return out


def _message_descriptor(ts: payload_pb2.TypeSpec, descriptors: descriptor_pb2.FileDescriptorSet) -> Any:
    return message_class(descriptors, ts.message_type).DESCRIPTOR


def converter(ts: payload_pb2.TypeSpec, descriptors: descriptor_pb2.FileDescriptorSet, what: str) -> Converter:
    """The space of an advertised TypeSpec (``what`` names it in errors: "action", "observation")."""
    kind = ts.kind
    if kind == payload_pb2.PAYLOAD_KIND_TENSOR:
        return _tensor(ts.tensor)
    if kind == payload_pb2.PAYLOAD_KIND_JSON:
        schema = from_struct(ts.json_schema)
        if not schema:
            raise SpaceError(f"the {what} type is any JSON value: it has no space (declare a JSON Schema)")
        return _schema(schema, schema, what)
    if kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
        return _message(_message_descriptor(ts, descriptors), what, unwrap=True)
    raise SpaceError(f"the environment declares no {what} type: Gymnasium needs one to derive the {what} space")
