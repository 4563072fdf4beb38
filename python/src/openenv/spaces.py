"""Gymnasium spaces and the contract's types: ONE converter, both directions.

An environment that holds a Gymnasium space declares it with :func:`declaration` (what its
``action_type``/``observation_type`` are); a client that reads an advertised ``TypeSpec``
gets the space back with :func:`converter`. Both sides translate values with the same
:class:`Converter` (an environment builds it with :func:`space_converter`: the declaration's
own TypeSpec read back), so the two directions cannot disagree, and a space that would not
come back exactly is refused where it is declared. Gymnasium is imported on first use: this
module is importable without it (protoenv-catalog's importers and :mod:`openenv.gym` both
use it).

The mapping (docs/catalog.md, "Spaces"):

==========================================  ==================================================
Gymnasium space                             Contract type
==========================================  ==================================================
``Box(low, high, shape, dtype)``            tensor of ``dtype`` and ``shape``; bounds the same
                                            for every element as ``minimum``/``maximum``, per
                                            dimension as ``element_minimum``/``_maximum``
``MultiDiscrete(nvec, dtype, start)``       integer tensor, ``categorical``, element bounds
                                            ``start .. start + nvec - 1``
``MultiBinary(n)``                          bool tensor of shape ``n`` (values 0/1 as bools)
``Discrete(n, start)``                      JSON integer ``start .. start + n - 1``
``Text(max_length, min_length, charset)``   JSON string: ``minLength``/``maxLength`` and a
                                            ``pattern`` of the character set
``Tuple(spaces)``                           JSON array, ``prefixItems`` (one schema each)
``Dict(spaces)``                            JSON object, every property required, in order
``Sequence(space)``                         JSON array of ``items``
``Graph(node_space, edge_space)``           JSON object ``{nodes, edges, edge_links}``
``OneOf(spaces)``                           JSON array ``[index, value]``
==========================================  ==================================================

Values without a fixed shape (docs/training.md, "Text and tool environments"): a part that is
any JSON value (an empty schema, an object without declared ``properties``, an array without
an ``items`` schema; a ``google.protobuf.Struct``, ``Value`` or ``ListValue`` field, as a tool
call's ``arguments`` and a tool result's ``structured_content``) is a ``Text`` space of
``JSON_MAX_TEXT`` characters holding a compact JSON document, ASCII only (``json.dumps(v,
separators=(",", ":"))``: ``json.loads`` reads it back); ``from_gym`` takes that text or the
value itself (a dict, a list). A ``bytes`` field is a ``Text`` of its standard base64 (as
protobuf's JSON mapping writes it; ``from_gym`` takes bytes too); a ``Duration`` or a
``Timestamp`` a float64 Box of shape ``()`` in seconds (0 leaves the field unset); another
well-known type a ``Text`` of its protobuf JSON mapping. A message's ``from_gym`` leaves the
fields a ``dict`` omits unset (a tool call: ``{"name": "move", "arguments": {"to": 3}}``), and
the empty members of a ``oneof`` (the Dict has a key for each; the one set is the non-empty one).

Inside JSON (a Box in a Dict, ...), a space whose JSON Schema alone would map to another one
carries the annotation ``"x-space": {"type": NAME, ...}`` (JSON Schema ignores unknown
keywords): a Box (``dtype``; its arrays list each element's bounds), a MultiDiscrete, a
MultiBinary, a Discrete too wide for the default mapping, a stacked Sequence, a Graph, a
OneOf. Other TypeSpecs map too (messages, JSON Schemas of any environment): see
:func:`converter`.
"""

from __future__ import annotations

import base64
import json
import math
import re
import string
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from google.protobuf import descriptor, descriptor_pb2, json_format
from google.protobuf.message import Message

from openenv.runtime.codec import TensorSpec, codec_for, message_class
from openenv.v1 import payload_pb2
from openenv.values import from_struct

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = [
    "BASE64_CHARSET",
    "CHARSET",
    "JSON_MAX_TEXT",
    "Converter",
    "SpaceError",
    "converter",
    "declaration",
    "json_converter",
    "json_schema",
    "space_converter",
    "type_spec",
]

CHARSET = string.printable
"""The characters of a ``Text`` space whose schema names none (printable ASCII, whitespace)."""

DEFAULT_MAX_TEXT = 4096
"""``Text.max_length`` of strings whose schema sets no ``maxLength``."""

JSON_MAX_TEXT = 1 << 16
"""``Text.max_length`` of a JSON document or a base64 text (see "Values without a fixed shape")."""

BASE64_CHARSET = string.ascii_letters + string.digits + "+/="
"""The characters of the ``Text`` space of a ``bytes`` field (standard base64)."""

MAX_DISCRETE = 1 << 16
"""JSON integers with both bounds become ``Discrete`` up to this many values (wider: a Box,
unless annotated ``"x-space": {"type": "Discrete"}``)."""

SPACE = "x-space"
"""The JSON Schema annotation naming the space of a schema that would map to another one."""

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


def _gym() -> Any:
    try:
        import gymnasium
    except ImportError as e:  # pragma: no cover - the gym extra
        raise SpaceError(f"Gymnasium spaces need gymnasium: pip install 'protoenv[gym]' ({e})") from e
    return gymnasium


class SpaceError(ValueError):
    """A type (or a part of it) that no Gymnasium space represents, or a space that no
    contract type represents exactly."""


class Converter:
    """A space and the translations of one declared type.

    ``to_gym(value)``: a value as the protocol decodes it (JSON-like data, a NumPy array, a
    protobuf message) -> an element of ``space``. ``from_gym(x)``: an element of ``space`` ->
    the value to encode (a client's action, an environment's observation).
    """

    def __init__(self, space: gym.Space[Any], to_gym: Callable[[Any], Any], from_gym: Callable[[Any], Any]) -> None:
        self.space, self.to_gym, self.from_gym = space, to_gym, from_gym


# ================================================================ space -> contract type


def _dtype_name(dtype: Any) -> str:
    return str(np.dtype(dtype).name)


def _tensor_bounds(space: Any) -> tuple[Any, Any]:
    """A Box's bounds for a TensorSpec: None where they are the dtype's own limits."""
    low = np.asarray(space.low, dtype=np.float64)
    high = np.asarray(space.high, dtype=np.float64)
    if np.issubdtype(space.dtype, np.integer):
        info = np.iinfo(space.dtype)
        low = np.where(np.asarray(space.low) == info.min, -np.inf, low)
        high = np.where(np.asarray(space.high) == info.max, np.inf, high)
    return low, high


def declaration(space: gym.Space[Any]) -> Any:
    """The declared type (``action_type``/``observation_type``) of ``space``: a
    :class:`TensorSpec` for a Box, MultiDiscrete or MultiBinary, a JSON Schema otherwise."""
    spaces = _gym().spaces
    if isinstance(space, spaces.Box):
        low, high = _tensor_bounds(space)
        return TensorSpec(space.dtype, tuple(space.shape), low, high)
    if isinstance(space, spaces.MultiDiscrete):
        start = np.asarray(space.start)
        return TensorSpec(space.dtype, tuple(space.shape), start, start + np.asarray(space.nvec) - 1, categorical=True)
    if isinstance(space, spaces.MultiBinary):
        return TensorSpec(np.bool_, tuple(space.shape))
    return json_schema(space)


def _charset_pattern(chars: str) -> str:
    body = "".join("\\" + c if c in "\\]^-[" else c for c in chars)
    return f"^[{body}]*$"


def _charset_of(pattern: str) -> str | None:
    m = re.fullmatch(r"\^\[(.*)\]\*\$", pattern, re.DOTALL)
    if not m:
        return None
    return re.sub(r"\\(.)", r"\1", m.group(1), flags=re.DOTALL)


def _nested(schema_of: Callable[[tuple[int, ...]], dict[str, Any]], shape: tuple[int, ...]) -> dict[str, Any]:
    """The JSON Schema of an array of ``shape``, each element's schema from its index."""

    def level(prefix: tuple[int, ...]) -> dict[str, Any]:
        if len(prefix) == len(shape):
            return schema_of(prefix)
        n = shape[len(prefix)]
        return {
            "type": "array",
            "prefixItems": [level((*prefix, i)) for i in range(n)],
            "items": False,
            "minItems": n,
            "maxItems": n,
        }

    return level(())


def _number(dtype: Any, lo: float, hi: float) -> dict[str, Any]:
    integer = np.issubdtype(np.dtype(dtype), np.integer)
    s: dict[str, Any] = {"type": "integer" if integer else "number"}
    if math.isfinite(lo):
        s["minimum"] = int(lo) if integer else float(lo)
    if math.isfinite(hi):
        s["maximum"] = int(hi) if integer else float(hi)
    return s


def json_schema(space: gym.Space[Any]) -> dict[str, Any]:
    """The JSON Schema of ``space``'s values in their JSON form (a space inside JSON)."""
    spaces = _gym().spaces
    if isinstance(space, spaces.Discrete):
        start, n = int(space.start), int(space.n)
        s: dict[str, Any] = {"type": "integer", "minimum": start, "maximum": start + n - 1}
        if n > MAX_DISCRETE:
            s[SPACE] = {"type": "Discrete"}
        return s
    if isinstance(space, spaces.Box):
        low, high = _tensor_bounds(space)
        shape = tuple(space.shape)
        s = _nested(lambda i: _number(space.dtype, float(low[i]), float(high[i])), shape)
        s[SPACE] = {"type": "Box", "dtype": _dtype_name(space.dtype)}
        return s
    if isinstance(space, spaces.MultiDiscrete):
        first, nvec = np.asarray(space.start), np.asarray(space.nvec)
        shape = tuple(space.shape)
        s = _nested(lambda i: _number(np.int64, float(first[i]), float(first[i] + nvec[i] - 1)), shape)
        s[SPACE] = {"type": "MultiDiscrete", "dtype": _dtype_name(space.dtype)}
        return s
    if isinstance(space, spaces.MultiBinary):
        s = _nested(lambda i: {"type": "integer", "minimum": 0, "maximum": 1}, tuple(space.shape))
        s[SPACE] = {"type": "MultiBinary"}
        return s
    if isinstance(space, spaces.Tuple):
        items = [json_schema(x) for x in space.spaces]
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items), "maxItems": len(items)}
    if isinstance(space, spaces.Dict):
        props = {str(k): json_schema(x) for k, x in space.spaces.items()}
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    if isinstance(space, spaces.Text):
        return {
            "type": "string",
            "minLength": int(space.min_length),
            "maxLength": int(space.max_length),
            "pattern": _charset_pattern(space.character_set),
        }
    if isinstance(space, spaces.Sequence):
        s = {"type": "array", "items": json_schema(space.feature_space)}
        if space.stack:
            s[SPACE] = {"type": "Sequence", "stack": True}
        return s
    if isinstance(space, spaces.Graph):
        props = {"nodes": {"type": "array", "items": json_schema(space.node_space)}}
        if space.edge_space is not None:
            props["edges"] = {"type": "array", "items": json_schema(space.edge_space)}
        link = {"type": "integer", "minimum": 0}
        props["edge_links"] = {
            "type": "array",
            "items": {"type": "array", "prefixItems": [link, link], "items": False, "minItems": 2, "maxItems": 2},
        }
        return {
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
            SPACE: {"type": "Graph"},
        }
    if isinstance(space, spaces.OneOf):
        k = len(space.spaces)
        index = {"type": "integer", "minimum": 0, "maximum": k - 1}
        return {
            "type": "array",
            "prefixItems": [index, {"anyOf": [json_schema(x) for x in space.spaces]}],
            "items": False,
            "minItems": 2,
            "maxItems": 2,
            SPACE: {"type": "OneOf"},
        }
    raise SpaceError(f"no contract type represents the space {space!r}")


def type_spec(declared: Any) -> payload_pb2.TypeSpec:
    """The TypeSpec an environment advertises for a declared type (as its server builds it)."""
    return codec_for(declared).spec()


def space_converter(space: gym.Space[Any], what: str = "space") -> Converter:
    """The :class:`Converter` of ``space`` as an environment declares it (:func:`declaration`),
    read back from its TypeSpec as a client reads it: what an environment translates its
    values with. Raises :class:`SpaceError` when the space does not come back exactly."""
    conv = converter(type_spec(declaration(space)), descriptor_pb2.FileDescriptorSet(), what)
    if conv.space != space:
        raise SpaceError(f"{what}: {space!r} comes back from its contract type as {conv.space!r}")
    return conv


def json_converter(space: gym.Space[Any], what: str = "space") -> Converter:
    """The :class:`Converter` of ``space`` in its JSON form (:func:`json_schema`, the form a space
    takes inside JSON: a game's ``Dict`` of a board and an action mask, each agent's view):
    ``from_gym`` writes JSON-ready values (lists, numbers), ``to_gym`` reads them back. Raises
    :class:`SpaceError` when the space does not come back exactly from that schema."""
    schema = json_schema(space)
    conv = _schema(schema, schema, what)
    if conv.space != space:
        raise SpaceError(f"{what}: {space!r} comes back from its JSON form as {conv.space!r}")
    return conv


# ================================================================ contract type -> space


def _scalar_box(dtype: Any, low: float | None = None, high: float | None = None) -> Converter:
    gym = _gym()
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


def _text(max_length: Any = None, min_length: Any = None, pattern: Any = None) -> Converter:
    charset = _charset_of(pattern) if isinstance(pattern, str) else None
    space = _gym().spaces.Text(
        max_length=int(max_length or DEFAULT_MAX_TEXT), min_length=int(min_length or 0), charset=charset or CHARSET
    )
    return Converter(space, str, str)


def _discrete(n: int, start: int) -> Converter:
    return Converter(_gym().spaces.Discrete(n, start=start), np.int64, int)


def _discrete_values(values: list[Any]) -> Converter:
    index = {repr(v): i for i, v in enumerate(values)}

    def to_gym(v: Any) -> np.int64:
        i = index.get(repr(v))
        if i is None:
            raise ValueError(f"{v!r} is not one of {values!r}")
        return np.int64(i)

    return Converter(_gym().spaces.Discrete(len(values)), to_gym, lambda x: values[int(x)])


def _boolean() -> Converter:
    return Converter(_gym().spaces.Discrete(2), lambda v: np.int64(bool(v)), lambda x: bool(int(x)))


def _json_text(what: str) -> Converter:
    """Any JSON value as a ``Text`` of its compact JSON document (values without a fixed shape)."""

    def from_gym(x: Any) -> Any:
        if not isinstance(x, str):
            return x  # the value itself: a dict, a list, a number
        try:
            return json.loads(x)
        except ValueError as e:
            raise ValueError(f"{what}: not a JSON document ({e}): {x[:80]!r}") from None

    return Converter(_json_space(), _dumps, from_gym)


def _json_space() -> Any:
    return _gym().spaces.Text(max_length=JSON_MAX_TEXT, min_length=0, charset=CHARSET)


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _sequence(item: Converter, stack: bool = False) -> Converter:
    gym = _gym()
    space = gym.spaces.Sequence(item.space, stack=stack)
    if stack:  # one batched element (as Gymnasium's own samples of a stacked Sequence)
        from gymnasium.vector.utils import concatenate, create_empty_array, iterate

        def stacked(v: Any) -> Any:
            items = [item.to_gym(e) for e in v]
            out: Any = create_empty_array(item.space, n=len(items))
            return concatenate(item.space, items, out)

        return Converter(space, stacked, lambda x: [item.from_gym(e) for e in iterate(space.stacked_feature_space, x)])
    return Converter(space, lambda v: tuple(item.to_gym(e) for e in v), lambda x: [item.from_gym(e) for e in x])


def _tuple(parts: list[Converter]) -> Converter:
    return Converter(
        _gym().spaces.Tuple([c.space for c in parts]),
        lambda v: tuple(c.to_gym(e) for c, e in zip(parts, v, strict=True)),
        lambda x: [c.from_gym(e) for c, e in zip(parts, x, strict=True)],
    )


def _dict(parts: dict[str, Converter], where: str) -> Converter:
    def to_gym(v: Mapping[str, Any]) -> dict[str, Any]:
        missing = [k for k in parts if k not in v]
        if missing:
            raise ValueError(f"{where}: value lacks {', '.join(missing)}")
        return {k: c.to_gym(v[k]) for k, c in parts.items()}

    # In the declared order (an OrderedDict: Gymnasium keeps it as given).
    space = _gym().spaces.Dict(OrderedDict((k, c.space) for k, c in parts.items()))
    return Converter(space, to_gym, lambda x: {k: c.from_gym(x[k]) for k, c in parts.items()})


def _bounds_box(dtype: Any, shape: tuple[int, ...], low: Any, high: Any) -> Any:
    """A Box of ``dtype``/``shape``; ``low``/``high`` arrays with -inf/+inf for unbounded."""
    dt = np.dtype(dtype)
    low = np.broadcast_to(np.asarray(low, dtype=np.float64), shape)
    high = np.broadcast_to(np.asarray(high, dtype=np.float64), shape)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        low = np.where(np.isfinite(low), np.clip(low, info.min, info.max), info.min)
        high = np.where(np.isfinite(high), np.clip(high, info.min, info.max), info.max)
        # Exact integers (float64 cannot hold every int64 limit): the dtype's own where clipped.
        ilow = np.array([info.min if x <= info.min else int(x) for x in low.reshape(-1)], dtype=dt).reshape(shape)
        ihigh = np.array([info.max if x >= info.max else int(x) for x in high.reshape(-1)], dtype=dt).reshape(shape)
        return _gym().spaces.Box(low=ilow, high=ihigh, shape=shape, dtype=dt)
    return _gym().spaces.Box(low=low.astype(dt), high=high.astype(dt), shape=shape, dtype=dt)


def _box(space: Any) -> Converter:
    dtype, shape = space.dtype, space.shape
    return Converter(
        space, lambda v: np.asarray(v, dtype=dtype).reshape(shape), lambda x: np.asarray(x, dtype=dtype).tolist()
    )


# ------------------------------------------------------------------------------ tensors


def _binary_n(shape: tuple[int, ...]) -> Any:
    """``MultiBinary``'s ``n``: a count for one dimension (``MultiBinary(4)``), else the shape."""
    return int(shape[0]) if len(shape) == 1 else (list(shape) or [1])


def _tensor(spec: payload_pb2.TensorSpec) -> Converter:
    gym = _gym()
    dt = _DTYPES.get(spec.dtype)
    if dt is None:
        raise SpaceError("a tensor TypeSpec without a dtype has no space")
    shape = tuple(int(d) for d in spec.shape)
    if any(d < 0 for d in shape):
        raise SpaceError(f"a tensor of variable shape {list(shape)} has no Box space (every extent must be fixed)")
    if dt is np.bool_:
        return Converter(
            gym.spaces.MultiBinary(_binary_n(shape)),
            lambda v: np.asarray(v, dtype=np.int8).reshape(shape or (1,)),
            lambda x: np.asarray(x, dtype=np.bool_).reshape(shape),
        )
    dtype = np.dtype(dt)
    n = math.prod(shape)
    bounds = []
    for name, unbounded in (("minimum", -np.inf), ("maximum", np.inf)):
        per = getattr(spec, f"element_{name}")
        if per:
            if len(per) != n:
                raise SpaceError(f"a tensor of shape {list(shape)} has {n} elements, not {len(per)} {name} bounds")
            bounds.append(np.asarray(per, dtype=np.float64).reshape(shape))
        else:
            bounds.append(np.full(shape, getattr(spec, name) if spec.HasField(name) else unbounded))
    low, high = bounds
    if spec.categorical:
        if not np.issubdtype(dtype, np.integer) or not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise SpaceError("a categorical tensor needs an integer dtype and every element bounded")
        start = low.astype(np.int64)
        space: Any = gym.spaces.MultiDiscrete(high.astype(np.int64) - start + 1, dtype=dtype, start=start)
    else:
        space = _bounds_box(dtype, shape, low, high)
    return Converter(space, lambda v: np.asarray(v, dtype=dtype).reshape(shape), lambda x: np.asarray(x, dtype=dtype))


# ------------------------------------------------------------------------------ JSON Schema


def _fixed_array(n: int, items: Mapping[str, Any]) -> Converter:
    """A JSON array of exactly ``n`` numbers (or integers) as a Box of shape (n,)."""
    integer = items.get("type") != "number"
    lo, hi = items.get("minimum"), items.get("maximum")
    space = _bounds_box(
        np.int64 if integer else np.float64, (n,), -np.inf if lo is None else lo, np.inf if hi is None else hi
    )
    dtype = space.dtype
    return Converter(space, lambda v: np.asarray(v, dtype=dtype), lambda x: np.asarray(x).tolist())


def _nested_numbers(s: Mapping[str, Any], where: str) -> Converter | None:
    """Nested fixed-length arrays of numbers (a board of rows of cells) as one Box of their
    whole shape, its bounds element by element; None when ``s`` is not that."""
    try:
        shape, elems = _elements(s, where)
    except SpaceError:
        return None
    if not elems or any(e.get("type") not in ("number", "integer") or "enum" in e for e in elems):
        return None
    integer = all(e.get("type") == "integer" for e in elems)
    low = np.array([e.get("minimum", -np.inf) for e in elems], dtype=np.float64).reshape(shape)
    high = np.array([e.get("maximum", np.inf) for e in elems], dtype=np.float64).reshape(shape)
    space = _bounds_box(np.int64 if integer else np.float64, shape, low, high)
    dtype = space.dtype
    return Converter(space, lambda v: np.asarray(v, dtype=dtype), lambda x: np.asarray(x).tolist())


def _elements(s: Mapping[str, Any], where: str) -> tuple[tuple[int, ...], list[Mapping[str, Any]]]:
    """The shape and the element schemas (row-major) of nested fixed-length arrays."""
    shape: list[int] = []
    level: list[Mapping[str, Any]] = [s]
    while level and level[0].get("type") == "array":
        n = level[0].get("minItems")
        if not isinstance(n, (int, float)) or n != level[0].get("maxItems"):
            raise SpaceError(f"{where}: an array of a tensor has a fixed length (minItems = maxItems)")
        n = int(n)
        nxt: list[Mapping[str, Any]] = []
        for a in level:
            prefix = a.get("prefixItems")
            if isinstance(prefix, list) and len(prefix) == n:
                nxt.extend(prefix)
            elif isinstance(a.get("items"), Mapping):
                nxt.extend([a["items"]] * n)
            else:
                raise SpaceError(f"{where}: an array of a tensor lists its items")
        shape.append(n)
        level = nxt
    return tuple(shape), level


def _annotated(s: Mapping[str, Any], ann: Mapping[str, Any], root: Mapping[str, Any], where: str) -> Converter:
    gym = _gym()
    kind = ann.get("type")
    if kind in ("Box", "MultiDiscrete", "MultiBinary"):
        shape, elems = _elements(s, where)
        low = np.array([e.get("minimum", -np.inf) for e in elems], dtype=np.float64).reshape(shape)
        high = np.array([e.get("maximum", np.inf) for e in elems], dtype=np.float64).reshape(shape)
        if kind == "MultiBinary":
            space: Any = gym.spaces.MultiBinary(_binary_n(shape))
            return Converter(
                space, lambda v: np.asarray(v, dtype=np.int8).reshape(shape), lambda x: np.asarray(x).tolist()
            )
        try:
            dtype = np.dtype(str(ann.get("dtype", "float64")))
        except TypeError:
            raise SpaceError(f"{where}: unknown dtype {ann.get('dtype')!r}") from None
        if kind == "MultiDiscrete":
            start = low.astype(np.int64)
            space = gym.spaces.MultiDiscrete(high.astype(np.int64) - start + 1, dtype=dtype, start=start)
        else:
            space = _bounds_box(dtype, shape, low, high)
        return _box(space)
    if kind == "Discrete":
        lo, hi = s.get("minimum"), s.get("maximum")
        if lo is None or hi is None:
            raise SpaceError(f"{where}: a Discrete integer has both bounds")
        return _discrete(int(hi) - int(lo) + 1, int(lo))
    if kind == "Sequence":
        items = s.get("items")
        if not isinstance(items, Mapping):
            raise SpaceError(f"{where}: a Sequence has an items schema")
        return _sequence(_schema(items, root, f"{where}[]"), stack=bool(ann.get("stack")))
    if kind == "Graph":
        props = s.get("properties") or {}
        nodes = _schema((props.get("nodes") or {}).get("items") or {}, root, f"{where}.nodes[]")
        edges_s = props.get("edges")
        edges = _schema(edges_s.get("items") or {}, root, f"{where}.edges[]") if edges_s else None
        space = gym.spaces.Graph(nodes.space, edges.space if edges else None)

        def graph_to_gym(v: Mapping[str, Any]) -> Any:
            node_arr = np.asarray([nodes.to_gym(x) for x in v["nodes"]], dtype=space.node_space.dtype)
            edge_arr = None
            if edges is not None:
                edge_arr = np.asarray([edges.to_gym(x) for x in v.get("edges", [])], dtype=space.edge_space.dtype)
                edge_arr = edge_arr.reshape((len(v.get("edges", [])), *space.edge_space.shape))
            links = np.asarray(v.get("edge_links", []), dtype=np.int32).reshape(-1, 2)
            node_arr = node_arr.reshape((len(v["nodes"]), *space.node_space.shape))
            if edges is None or not len(links):  # no edges: None, as Gymnasium's own samples
                return gym.spaces.GraphInstance(node_arr, None, None)
            return gym.spaces.GraphInstance(node_arr, edge_arr, links)

        def graph_from_gym(x: Any) -> dict[str, Any]:
            out = {"nodes": [nodes.from_gym(n) for n in x.nodes]}
            if edges is not None:
                out["edges"] = [edges.from_gym(e) for e in (x.edges if x.edges is not None else [])]
            links = x.edge_links if x.edge_links is not None else np.zeros((0, 2), dtype=np.int32)
            out["edge_links"] = np.asarray(links).tolist()
            return out

        return Converter(space, graph_to_gym, graph_from_gym)
    if kind == "OneOf":
        prefix = s.get("prefixItems")
        options = prefix[1].get("anyOf") if isinstance(prefix, list) and len(prefix) == 2 else None
        if not isinstance(options, list) or not options:
            raise SpaceError(f"{where}: a OneOf lists its options (prefixItems [index, {{anyOf}}])")
        parts = [_schema(o, root, f"{where}[{i}]") for i, o in enumerate(options)]
        space = gym.spaces.OneOf([c.space for c in parts])
        return Converter(
            space,
            lambda v: (np.int64(v[0]), parts[int(v[0])].to_gym(v[1])),
            lambda x: [int(x[0]), parts[int(x[0])].from_gym(x[1])],
        )
    raise SpaceError(f"{where}: unknown {SPACE} {dict(ann)!r}")


def _schema(s: Mapping[str, Any], root: Mapping[str, Any], where: str) -> Converter:
    ref = s.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/"):
            raise SpaceError(f"{where}: only local $refs map to spaces, not {ref!r}")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return _schema(target, root, where)
    ann = s.get(SPACE)
    if isinstance(ann, Mapping):
        return _annotated(s, ann, root, where)
    if "enum" in s:
        return _discrete_values(list(s["enum"]))
    if "const" in s:
        return _discrete_values([s["const"]])
    t = s.get("type")
    if t == "boolean":
        return _boolean()
    if t == "integer":
        lo, hi = s.get("minimum"), s.get("maximum")
        if lo is not None and hi is not None and 0 <= hi - lo < MAX_DISCRETE:
            return _discrete(int(hi) - int(lo) + 1, int(lo))
        return _scalar_box(np.int64, lo, hi)
    if t == "number":
        return _scalar_box(np.float64, s.get("minimum"), s.get("maximum"))
    if t == "string":
        return _text(s.get("maxLength"), s.get("minLength"), s.get("pattern"))
    if t == "array":
        prefix = s.get("prefixItems")
        if isinstance(prefix, list) and prefix and s.get("items") is False:
            return _tuple([_schema(p, root, f"{where}[{i}]") for i, p in enumerate(prefix)])
        items = s.get("items")
        if not isinstance(items, Mapping) or not items:  # any array: its JSON text
            return _json_text(where)
        n, m = s.get("minItems"), s.get("maxItems")
        if items.get("type") in ("number", "integer") and n is not None and n == m and "enum" not in items:
            return _fixed_array(int(n), items)
        if items.get("type") == "array" and n is not None and n == m:
            board = _nested_numbers(s, where)
            if board is not None:  # a board: rows of a fixed count of numbers, one Box of their shape
                return board
        return _sequence(_schema(items, root, f"{where}[]"))
    if t == "object" or "properties" in s:
        props = s.get("properties")
        if not isinstance(props, Mapping) or not props:  # any object: its JSON text
            return _json_text(where)
        required = [k for k in s.get("required") or () if k in props]
        order = required + [k for k in props if k not in required]
        return _dict({k: _schema(props[k], root, f"{where}.{k}") for k in order}, where)
    if t is None and not any(k in s for k in ("anyOf", "oneOf", "allOf", "not", "if")):
        return _json_text(where)  # any JSON value ({} or annotations only): its JSON text
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
    else:  # bytes: base64 text, as protobuf's JSON mapping writes them
        c = _base64()
    if f.is_repeated:
        c = _sequence(c)
    return c


def _base64() -> Converter:
    space = _gym().spaces.Text(max_length=JSON_MAX_TEXT, min_length=0, charset=BASE64_CHARSET)

    def from_gym(x: Any) -> bytes:
        return bytes(x) if isinstance(x, (bytes, bytearray)) else base64.b64decode(str(x), validate=True)

    return Converter(space, lambda v: base64.b64encode(bytes(v)).decode("ascii"), from_gym)


_SECONDS = ("google.protobuf.Duration", "google.protobuf.Timestamp")


def _well_known(d: descriptor.Descriptor, where: str) -> Converter:
    """A ``google.protobuf`` type: seconds for a Duration or a Timestamp, else the Text of its
    protobuf JSON mapping (a Struct's is its JSON object)."""
    cls = message_class(_file_set(d), d.full_name)
    if d.full_name in _SECONDS:

        def seconds_from_gym(x: Any) -> Message | None:
            ns = round(float(x) * 1e9)
            if ns == 0:
                return None  # unset: "no timeout", not "a timeout of zero"
            msg: Any = cls()  # a Duration or a Timestamp: both have FromNanoseconds
            msg.FromNanoseconds(ns)
            out: Message = msg
            return out

        return Converter(_scalar_box(np.float64).space, lambda m: np.float64(m.ToNanoseconds() / 1e9), seconds_from_gym)
    text = _json_text(where)

    def wk_from_gym(x: Any) -> Message:
        try:
            return json_format.ParseDict(text.from_gym(x), cls())
        except json_format.ParseError as e:
            raise ValueError(f"{where}: not a {d.full_name} in JSON: {e}") from None

    return Converter(text.space, lambda m: _dumps(json_format.MessageToDict(m)), wk_from_gym)


def _message(d: descriptor.Descriptor, where: str, *, unwrap: bool) -> Converter:
    if d.full_name.startswith("google.protobuf."):
        return _well_known(d, where)
    cls = message_class(_file_set(d), d.full_name)
    parts = {f.name: _field(f, where) for f in d.fields}
    if not parts:
        raise SpaceError(f"{where}: message {d.full_name} has no fields")

    # A oneof's members all have keys in the Dict (its fixed shape): the empty ones are unset.
    in_oneof = {f.name for f in d.fields if f.containing_oneof is not None}

    def build(values: Mapping[str, Any]) -> Message:
        msg = cls()
        for name, v in values.items():
            if v is None:  # left unset (a Duration of 0 s)
                continue
            if name in in_oneof and (v.ByteSize() == 0 if isinstance(v, Message) else not v):
                continue
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

    def from_gym(x: Mapping[str, Any]) -> Message:
        unknown = [k for k in x if k not in parts]
        if unknown:
            raise ValueError(f"{where}: {d.full_name} has no field {', '.join(map(str, unknown))}")
        return build({k: c.from_gym(x[k]) for k, c in parts.items() if k in x})  # omitted: unset

    return Converter(inner.space, lambda m: inner.to_gym(read(m)), from_gym)


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


def converter(ts: payload_pb2.TypeSpec, descriptors: descriptor_pb2.FileDescriptorSet, what: str) -> Converter:
    """The space of an advertised TypeSpec (``what`` names it in errors: "action", "observation").

    Besides the spaces :func:`declaration` writes, any environment's types map: a JSON
    ``enum`` (or ``const``) is a ``Discrete`` over its values, a boolean ``Discrete(2)``, an
    unbounded integer or a number a Box of shape ``()``, an array of a fixed count of numbers
    a Box ``(n,)``, any other array a ``Sequence``; a message is the ``Dict`` of its fields
    (enums ``Discrete`` of their values but a ``*_UNSPECIFIED`` zero, bools ``Discrete(2)``,
    numbers Box ``()``, strings ``Text``, repeated fields ``Sequence``), and a message of
    exactly one field that field's space. A type that fits none raises :class:`SpaceError`.
    """
    kind = ts.kind
    if kind == payload_pb2.PAYLOAD_KIND_TENSOR:
        return _tensor(ts.tensor)
    if kind == payload_pb2.PAYLOAD_KIND_JSON:
        schema = from_struct(ts.json_schema)
        return _schema(schema, schema, what)
    if kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
        desc: Any = message_class(descriptors, ts.message_type).DESCRIPTOR
        return _message(desc, what, unwrap=True)
    raise SpaceError(f"the environment declares no {what} type: Gymnasium needs one to derive the {what} space")
