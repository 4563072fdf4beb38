"""Payload codecs: how declared Python types travel as ``openenv.v1.Payload``.

An environment declares its action, observation and state types; each declaration is
turned into a :class:`Codec` once per process (schemas compiled, descriptors looked up),
so the step loop only encodes and decodes. A declaration may be:

* a protobuf message class: typed payloads (``Payload.message``, an ``Any``);
* a class with ``__openenv_proto__`` (a message class) plus ``to_proto()`` and
  ``from_proto(msg)``: a Python-side view of a typed payload;
* a :class:`TensorSpec`: dense arrays (``Payload.tensor``), decoded as NumPy views;
* a ``dict``: a JSON Schema, for JSON payloads validated with ``jsonschema``;
* any other Python type pydantic understands (dataclass, TypedDict, ``BaseModel``,
  ``list[int]``, ``str``...): JSON payloads with the schema pydantic derives;
* ``None``: anything goes; JSON-like values, tensors and messages are passed through.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from google.protobuf import any_pb2, descriptor, descriptor_pb2, json_format, message_factory
from google.protobuf.message import DecodeError, Message

from openenv.errors import InvalidArgument
from openenv.runtime.granularity import protobuf_refusal
from openenv.v1 import payload_pb2
from openenv.values import from_struct, from_value, to_struct, to_value

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Codec",
    "TensorSpec",
    "codec_for",
    "register_declaration_codec",
    "descriptor_set",
    "from_struct",
    "from_value",
    "message_json_schema",
    "to_struct",
    "to_value",
]

# --------------------------------------------------------------------------- tensors

# NumPy is imported on first use of a tensor, not with the runtime: a server whose types hold
# no tensors never loads it (~15 MiB of its idle RSS; docs/performance.md, cold start).
_DTYPE_NAMES: dict[payload_pb2.DType, str] = {
    payload_pb2.D_TYPE_BOOL: "bool",
    payload_pb2.D_TYPE_INT8: "<i1",
    payload_pb2.D_TYPE_UINT8: "<u1",
    payload_pb2.D_TYPE_INT16: "<i2",
    payload_pb2.D_TYPE_UINT16: "<u2",
    payload_pb2.D_TYPE_INT32: "<i4",
    payload_pb2.D_TYPE_UINT32: "<u4",
    payload_pb2.D_TYPE_INT64: "<i8",
    payload_pb2.D_TYPE_UINT64: "<u8",
    payload_pb2.D_TYPE_FLOAT16: "<f2",
    payload_pb2.D_TYPE_FLOAT32: "<f4",
    payload_pb2.D_TYPE_FLOAT64: "<f8",
}


@functools.cache
def _dtypes() -> dict[payload_pb2.DType, np.dtype[Any]]:
    import numpy as np

    return {code: np.dtype(name) for code, name in _DTYPE_NAMES.items()}


@functools.cache
def _dtype_codes() -> dict[str, payload_pb2.DType]:
    return {d.name: code for code, d in _dtypes().items()}


def is_ndarray(value: Any) -> bool:
    """Whether ``value`` is a NumPy array, without importing NumPy (none exists before it is)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def dtype_code(dtype: Any) -> payload_pb2.DType:
    """The ``openenv.v1.DType`` of a NumPy dtype (or its name)."""
    import numpy as np

    try:
        return _dtype_codes()[np.dtype(dtype).name]
    except (KeyError, TypeError) as e:
        raise TypeError(f"unsupported tensor dtype {dtype!r}") from e


def tensor_to_proto(arr: Any, out: payload_pb2.Tensor | None = None) -> payload_pb2.Tensor:
    """Pack an array-like into a ``Tensor`` (one copy, into the message)."""
    import numpy as np

    a = np.asarray(arr)
    code = dtype_code(a.dtype)
    t = payload_pb2.Tensor() if out is None else out
    t.dtype = code
    t.shape[:] = a.shape
    t.data = np.ascontiguousarray(a, dtype=_dtypes()[code]).tobytes()
    return t


def tensor_from_proto(t: payload_pb2.Tensor) -> np.ndarray:
    """View a ``Tensor`` as a read-only NumPy array without copying its bytes."""
    import numpy as np

    dt = _dtypes().get(t.dtype)
    if dt is None:
        raise InvalidArgument(f"tensor has invalid dtype {t.dtype}")
    shape = tuple(t.shape)
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"tensor shape {shape} has a negative extent")
    n = math.prod(shape)
    if len(t.data) != n * dt.itemsize:
        raise InvalidArgument(f"tensor data is {len(t.data)} bytes, shape {shape} of {dt.name} needs {n * dt.itemsize}")
    return np.frombuffer(t.data, dtype=dt).reshape(shape)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Declares a tensor-valued action, observation or state.

    ``shape`` entries of -1 (or None) may vary. ``minimum``/``maximum`` bound every element:
    a number (the same bound for all), or an array of the (fixed) shape giving each element
    its own bound (-inf/+inf: unbounded), e.g. a Box whose dimensions have their own ranges;
    bounds the same for every element are kept as that number, and per-element ones as a
    tuple in row-major order. ``categorical``: the elements are independent choices, each an
    integer of its bounds (Gymnasium's ``MultiDiscrete``), not quantities.
    """

    dtype: Any
    shape: Sequence[int | None] = ()
    # A number, a tuple (row-major) or an array of the shape; kept as a float or a tuple.
    minimum: float | tuple[float, ...] | Any | None = None
    maximum: float | tuple[float, ...] | Any | None = None
    categorical: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        for name in ("minimum", "maximum"):
            object.__setattr__(self, name, self._bound(name, getattr(self, name)))
        if self.categorical:
            import numpy as np

            if not np.issubdtype(np.dtype(self.dtype), np.integer):
                raise ValueError(f"a categorical tensor has an integer dtype, not {np.dtype(self.dtype).name}")
            if (
                self.minimum is None
                or self.maximum is None
                or not all(math.isfinite(b) for b in self.element_bounds("minimum") + self.element_bounds("maximum"))
            ):
                raise ValueError("every element of a categorical tensor is bounded (minimum and maximum)")

    def _bound(self, name: str, bound: Any) -> float | tuple[float, ...] | None:
        if bound is None:
            return None
        if isinstance(bound, (int, float)):
            return float(bound)
        import numpy as np

        arr = np.asarray(bound, dtype=np.float64)
        if arr.ndim == 0:
            return float(arr)
        if any(d is None or d < 0 for d in self.shape) or arr.size != math.prod(int(d or 0) for d in self.shape):
            raise ValueError(
                f"{name} has {arr.size} bounds: per-element bounds need a fixed shape and one bound per element "
                f"(shape {list(self.shape)})"
            )
        if np.isnan(arr).any():
            raise ValueError(f"{name}: a bound is NaN")
        flat = tuple(float(x) for x in arr.reshape(-1))
        unbounded = -math.inf if name == "minimum" else math.inf
        if all(x == flat[0] for x in flat):
            return None if flat[0] == unbounded else flat[0]
        return flat

    def element_bounds(self, name: str) -> tuple[float, ...]:
        """``minimum`` or ``maximum`` of each element (row-major; -inf/+inf when unbounded),
        for a fixed shape; one value (the common bound) otherwise."""
        bound = getattr(self, name)
        unbounded = -math.inf if name == "minimum" else math.inf
        if isinstance(bound, tuple):
            return bound
        fixed = all(d is not None and d >= 0 for d in self.shape)
        n = math.prod(int(d) for d in self.shape if d is not None) if fixed else 1
        return (unbounded if bound is None else bound,) * n

    def to_proto(self) -> payload_pb2.TensorSpec:
        spec = payload_pb2.TensorSpec(dtype=dtype_code(self.dtype), shape=[-1 if d is None else d for d in self.shape])
        for name, pick in (("minimum", min), ("maximum", max)):
            bound = getattr(self, name)
            if isinstance(bound, tuple):
                getattr(spec, f"element_{name}").extend(bound)
                if all(math.isfinite(b) for b in bound):  # the envelope, for readers of `minimum` only
                    setattr(spec, name, pick(bound))
            elif bound is not None:
                setattr(spec, name, bound)
        spec.categorical = self.categorical
        return spec

    @classmethod
    def from_proto(cls, spec: payload_pb2.TensorSpec) -> TensorSpec:
        """The declaration a ``TensorSpec`` message advertises (per-element bounds as arrays)."""
        shape = tuple(None if d < 0 else int(d) for d in spec.shape)
        bounds: dict[str, Any] = {}
        for name in ("minimum", "maximum"):
            per = getattr(spec, f"element_{name}")
            if per:
                bounds[name] = tuple(per)
            elif spec.HasField(name):
                bounds[name] = getattr(spec, name)
        return cls(_dtypes()[spec.dtype], shape, categorical=spec.categorical, **bounds)


# --------------------------------------------------------------------------- descriptors


def descriptor_set(messages: Iterable[descriptor.Descriptor]) -> descriptor_pb2.FileDescriptorSet:
    """A FileDescriptorSet with the files defining ``messages`` and all their
    dependencies, dependencies first (so a pool can ``Add`` them in order)."""
    fds = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def visit(fd: descriptor.FileDescriptor) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            visit(dep)
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        fds.file.append(fdp)

    for m in messages:
        visit(m.file)
    return fds


_WKT_SCHEMAS: dict[str, dict[str, Any]] = {
    "google.protobuf.Struct": {"type": "object"},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array"},
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?\d+(\.\d+)?s$"},
    "google.protobuf.Any": {"type": "object", "required": ["@type"]},
    "google.protobuf.FieldMask": {"type": "string"},
    "google.protobuf.Empty": {"type": "object", "additionalProperties": False},
}
_INT64 = {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^-?\d+$"}]}
_FD = descriptor.FieldDescriptor
_SCALAR_SCHEMAS: dict[int, dict[str, Any]] = {
    _FD.TYPE_DOUBLE: {"anyOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]},
    _FD.TYPE_FLOAT: {"anyOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]},
    _FD.TYPE_INT32: {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
    _FD.TYPE_SINT32: {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
    _FD.TYPE_SFIXED32: {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
    _FD.TYPE_UINT32: {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
    _FD.TYPE_FIXED32: {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
    _FD.TYPE_INT64: _INT64,
    _FD.TYPE_SINT64: _INT64,
    _FD.TYPE_SFIXED64: _INT64,
    _FD.TYPE_UINT64: _INT64,
    _FD.TYPE_FIXED64: _INT64,
    _FD.TYPE_BOOL: {"type": "boolean"},
    _FD.TYPE_STRING: {"type": "string"},
    _FD.TYPE_BYTES: {"type": "string", "contentEncoding": "base64"},
}


def message_json_schema(desc: descriptor.Descriptor) -> dict[str, Any]:
    """JSON Schema of a message's canonical proto3 JSON mapping (recursive types via $defs)."""
    defs: dict[str, Any] = {}

    def msg_schema(d: descriptor.Descriptor) -> dict[str, Any]:
        if d.full_name in _WKT_SCHEMAS:
            return dict(_WKT_SCHEMAS[d.full_name])
        if d.full_name not in defs:
            defs[d.full_name] = {}  # placeholder breaks recursion
            props: dict[str, Any] = {}
            for f in d.fields:
                props[f.json_name] = field_schema(f)
            defs[d.full_name] = {"type": "object", "properties": props, "additionalProperties": False}
        return {"$ref": f"#/$defs/{d.full_name}"}

    def single(f: descriptor.FieldDescriptor) -> dict[str, Any]:
        if f.type == _FD.TYPE_MESSAGE and f.message_type is not None:
            return msg_schema(f.message_type)
        if f.type == _FD.TYPE_ENUM and f.enum_type is not None:
            return {"enum": [v.name for v in f.enum_type.values] + [v.number for v in f.enum_type.values]}
        return dict(_SCALAR_SCHEMAS[f.type])

    def field_schema(f: descriptor.FieldDescriptor) -> dict[str, Any]:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            return {"type": "object", "additionalProperties": single(f.message_type.fields_by_name["value"])}
        if f.is_repeated:
            return {"type": "array", "items": single(f)}
        return single(f)

    root = msg_schema(desc)
    if "$ref" not in root:
        return root
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **root, "$defs": defs}


# --------------------------------------------------------------------------- codecs


class Codec:
    """Encodes one declared type to ``Payload`` and back. Built once per declared type."""

    kind: payload_pb2.PayloadKind = payload_pb2.PAYLOAD_KIND_UNSPECIFIED
    declared: Any = None

    def encode(self, value: Any, out: payload_pb2.Payload | None = None) -> payload_pb2.Payload:
        """Encode ``value`` (into ``out`` when given)."""
        p = payload_pb2.Payload() if out is None else out
        if isinstance(value, Message):
            p.message.Pack(value)
        elif is_ndarray(value):
            tensor_to_proto(value, p.tensor)
        else:
            to_value(value, p.json)
        return p

    def decode(self, payload: payload_pb2.Payload) -> Any:
        """Decode and validate; raises :class:`InvalidArgument` for a bad payload."""
        kind = payload.WhichOneof("kind")
        if kind == "json":
            return from_value(payload.json)
        if kind == "tensor":
            return tensor_from_proto(payload.tensor)
        if kind == "message":
            return payload.message
        return None

    def to_json(self, value: Any) -> Any:
        """A JSON-able form of ``value`` (for JSON transports)."""
        if isinstance(value, Message):
            return json_format.MessageToDict(value)
        if is_ndarray(value):
            return value.tolist()
        return json.loads(json.dumps(value, default=_json_default)) if not _plain(value) else value

    def from_json(self, obj: Any) -> Any:
        """Decode a JSON-able form and validate it, as :meth:`decode` does."""
        return obj

    def json_schema(self) -> dict[str, Any]:
        return {}

    def spec(self, examples: Sequence[Any] = ()) -> payload_pb2.TypeSpec:
        """The ``TypeSpec`` advertised for this type."""
        spec = payload_pb2.TypeSpec(kind=self.kind)
        schema = self.json_schema()
        if schema:
            to_struct(schema, spec.json_schema)
        for ex in examples:
            self.encode(ex, spec.examples.add())
        return spec

    def message_descriptors(self) -> list[descriptor.Descriptor]:
        return []


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _json_default(o: Any) -> Any:
    np = sys.modules.get("numpy")  # no NumPy value exists before NumPy is imported
    if np is not None and isinstance(o, np.generic):
        return o.item()
    if np is not None and isinstance(o, np.ndarray):
        return o.tolist()
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    raise TypeError(f"{type(o).__name__} is not JSON-like")


def _descriptor_of(cls: type[Message]) -> descriptor.Descriptor:
    # types-protobuf types Message.DESCRIPTOR as `descriptor.Descriptor | upb Descriptor`; at run
    # time the upb one is a descriptor.Descriptor as well (DescriptorMetaclass.__instancecheck__).
    return cast(descriptor.Descriptor, cls.DESCRIPTOR)


class MessageCodec(Codec):
    """A protobuf message type, packed in ``Any``."""

    kind = payload_pb2.PAYLOAD_KIND_MESSAGE

    def __init__(self, cls: type[Message]) -> None:
        self.declared = self.cls = cls
        self.full_name = cls.DESCRIPTOR.full_name
        self._type_url_suffix = "/" + self.full_name

    def encode(self, value: Any, out: payload_pb2.Payload | None = None) -> payload_pb2.Payload:
        p = payload_pb2.Payload() if out is None else out
        if not isinstance(value, self.cls):
            raise TypeError(f"expected {self.full_name}, got {type(value).__name__}")
        p.message.Pack(value)
        return p

    def decode(self, payload: payload_pb2.Payload) -> Any:
        if payload.WhichOneof("kind") != "message":
            raise InvalidArgument(
                f"expected a {self.full_name} message payload, got {payload.WhichOneof('kind') or 'nothing'}"
            )
        return self.unpack(payload.message)

    def unpack(self, any_msg: any_pb2.Any) -> Message:
        if not any_msg.type_url.endswith(self._type_url_suffix):
            raise InvalidArgument(f"expected type {self.full_name}, got {any_msg.type_url or 'no type'}")
        msg = self.cls()
        value = any_msg.value
        too_fine = protobuf_refusal(value, _descriptor_of(self.cls))  # before upb materialises it
        if too_fine is not None:
            raise InvalidArgument(too_fine)
        try:
            msg.ParseFromString(value)
        except DecodeError as e:
            raise InvalidArgument(f"undecodable {self.full_name} bytes: {e}") from None
        return msg

    def to_json(self, value: Any) -> Any:
        return json_format.MessageToDict(value, preserving_proto_field_name=True)

    def from_json(self, obj: Any) -> Any:
        if not isinstance(obj, dict):
            raise InvalidArgument(f"expected a JSON object for {self.full_name}, got {type(obj).__name__}")
        try:
            return json_format.ParseDict(obj, self.cls())
        except json_format.ParseError as e:
            raise InvalidArgument(f"invalid {self.full_name}: {e}") from None

    def json_schema(self) -> dict[str, Any]:
        return message_json_schema(_descriptor_of(self.cls))

    def spec(self, examples: Sequence[Any] = ()) -> payload_pb2.TypeSpec:
        spec = super().spec(examples)
        spec.message_type = self.full_name
        return spec

    def message_descriptors(self) -> list[descriptor.Descriptor]:
        return [_descriptor_of(self.cls)]


_MsgT = TypeVar("_MsgT", bound=Message)


class _ProtoView(Protocol[_MsgT]):
    """What :class:`AdaptedCodec` needs of a declared view class."""

    __openenv_proto__: type[_MsgT]

    def to_proto(self) -> _MsgT: ...

    @classmethod
    def from_proto(cls, msg: _MsgT, /) -> Any: ...


class AdaptedCodec(MessageCodec):
    """A Python class viewing a message type: ``__openenv_proto__``, ``to_proto``, ``from_proto``."""

    view: type[_ProtoView[Any]]

    def __init__(self, cls: type[_ProtoView[Any]]) -> None:
        super().__init__(cls.__openenv_proto__)
        self.declared = self.view = cls

    def encode(self, value: Any, out: payload_pb2.Payload | None = None) -> payload_pb2.Payload:
        if isinstance(value, self.view):
            value = value.to_proto()
        return super().encode(value, out)

    def decode(self, payload: payload_pb2.Payload) -> Any:
        return self.view.from_proto(super().decode(payload))

    def to_json(self, value: Any) -> Any:
        return super().to_json(value.to_proto() if isinstance(value, self.view) else value)

    def from_json(self, obj: Any) -> Any:
        return self.view.from_proto(super().from_json(obj))


class TensorCodec(Codec):
    """A :class:`TensorSpec`-declared array."""

    kind = payload_pb2.PAYLOAD_KIND_TENSOR

    def __init__(self, spec: TensorSpec) -> None:
        import numpy as np

        self.declared = self.tspec = spec
        self.dtype = _dtypes()[dtype_code(spec.dtype)]
        # The bounds to compare with: a number, or one per element (shaped as the tensor).
        self.low: Any = None
        self.high: Any = None
        for name in ("minimum", "maximum"):
            bound = getattr(spec, name)
            if isinstance(bound, tuple):
                bound = np.asarray(bound, dtype=np.float64).reshape(tuple(int(d or 0) for d in spec.shape))
            setattr(self, "low" if name == "minimum" else "high", bound)

    def encode(self, value: Any, out: payload_pb2.Payload | None = None) -> payload_pb2.Payload:
        import numpy as np

        p = payload_pb2.Payload() if out is None else out
        tensor_to_proto(np.asarray(value, dtype=self.dtype), p.tensor)
        return p

    def decode(self, payload: payload_pb2.Payload) -> Any:
        if payload.WhichOneof("kind") != "tensor":
            raise InvalidArgument(f"expected a tensor payload, got {payload.WhichOneof('kind') or 'nothing'}")
        return self.check(tensor_from_proto(payload.tensor))

    def check(self, arr: np.ndarray) -> np.ndarray:
        if arr.dtype != self.dtype:
            raise InvalidArgument(f"expected dtype {self.dtype.name}, got {arr.dtype.name}")
        want = tuple(self.tspec.shape)
        if len(want) != arr.ndim or any(w not in (None, -1) and w != g for w, g in zip(want, arr.shape, strict=True)):
            raise InvalidArgument(f"expected shape {want}, got {arr.shape}")
        if arr.size and self.low is not None and (arr < self.low).any():
            raise InvalidArgument(f"element {arr[arr < self.low].flat[0]} below its minimum {self.tspec.minimum}")
        if arr.size and self.high is not None and (arr > self.high).any():
            raise InvalidArgument(f"element {arr[arr > self.high].flat[0]} above its maximum {self.tspec.maximum}")
        return arr

    def from_json(self, obj: Any) -> Any:
        import numpy as np

        try:
            arr = np.asarray(obj, dtype=self.dtype)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"not a {self.dtype.name} array: {e}") from None
        return self.check(arr)

    def json_schema(self) -> dict[str, Any]:
        return {"type": "array", "description": f"{self.dtype.name} tensor of shape {list(self.tspec.shape)}"}

    def spec(self, examples: Sequence[Any] = ()) -> payload_pb2.TypeSpec:
        spec = super().spec(examples)
        spec.tensor.CopyFrom(self.tspec.to_proto())
        return spec


class SchemaCodec(Codec):
    """JSON payloads validated against an explicit JSON Schema (validator built once)."""

    kind = payload_pb2.PAYLOAD_KIND_JSON

    def __init__(self, schema: Mapping[str, Any]) -> None:
        import jsonschema

        self.declared = self.schema = dict(schema)
        cls = jsonschema.validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(self.schema)
        self.validator = cls(self.schema)

    def decode(self, payload: payload_pb2.Payload) -> Any:
        if payload.WhichOneof("kind") != "json":
            raise InvalidArgument(f"expected a JSON payload, got {payload.WhichOneof('kind') or 'nothing'}")
        return self.from_json(from_value(payload.json))

    def from_json(self, obj: Any) -> Any:
        errors = sorted(self.validator.iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            details = [{"path": list(e.path), "message": e.message} for e in errors[:20]]
            raise InvalidArgument(f"does not match schema: {errors[0].message}", details=details)
        return obj

    def json_schema(self) -> dict[str, Any]:
        return self.schema


#: The JSON Schema keywords whose values are subschemas (walked to close object schemas).
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def closed_schema(schema: Any) -> Any:
    """``schema`` with every object schema that lists ``properties`` and says nothing about
    others closed (``"additionalProperties": false``): the exact shape of a dataclass, a
    TypedDict or a pydantic model, whose unknown fields strict validation refuses. A schema
    that says ``additionalProperties`` (e.g. a model with ``extra="allow"``) is kept."""
    if isinstance(schema, list):
        return [closed_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: closed_schema(v) for k, v in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed_schema(v) for v in out[key]]
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), dict):
            out[key] = closed_schema(out[key])
    if (
        isinstance(out.get("properties"), dict)
        and "additionalProperties" not in out
        and "unevaluatedProperties" not in out
        and out.get("type", "object") == "object"
    ):
        out["additionalProperties"] = False
    return out


def _schema_error(errors: list[Any]) -> InvalidArgument:
    """The INVALID_ARGUMENT of JSON Schema errors: the first one named by its path, every one
    (up to 20) in ``details``."""
    first = errors[0]
    path = list(first.absolute_path)
    if first.validator == "additionalProperties" and isinstance(first.instance, dict):
        allowed = first.schema.get("properties", {})
        unknown = sorted(k for k in first.instance if k not in allowed)
        where = ".".join(str(x) for x in path)
        message = f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}" + (
            f" in {where}" if where else ""
        )
    else:
        where = ".".join(str(x) for x in path)
        message = f"invalid value{' at ' + where if where else ''}: {first.message}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more: {errors[1].message})"
    details = [{"path": list(e.absolute_path), "message": e.message} for e in errors[:20]]
    return InvalidArgument(message, details=details)


class PydanticCodec(Codec):
    """JSON payloads of a Python type, validated and schema'd by pydantic's TypeAdapter.

    Strict (the default, RFC 0007): a value is accepted only when it is exactly a value of
    the advertised JSON Schema (no ``"7"`` or ``true`` for an integer, no unknown fields;
    object schemas are advertised closed, :func:`closed_schema`), then built by pydantic (which
    also runs the type's own validators). Lenient (``strict=False``, an environment's
    ``lenient_actions``): pydantic's lax mode alone, which coerces and drops unknown fields.
    """

    kind = payload_pb2.PAYLOAD_KIND_JSON

    def __init__(self, tp: Any, *, strict: bool = True) -> None:
        from pydantic import TypeAdapter, ValidationError

        self._validation_error = ValidationError
        self.declared = tp
        self.strict = strict
        self.adapter = TypeAdapter(pydantic_compatible(tp))
        schema = self.adapter.json_schema()
        self._schema = closed_schema(schema) if strict else schema
        # The full JSON Schema validator is built on first need: small flat actions never need
        # it (_exact_flat), and an idle server need not import jsonschema (docs/performance.md).
        self._validator: Any = None
        self._flat: dict[str, type | tuple[type, ...]] | None = _flat_object(self._schema) if strict else None
        self._required = frozenset(self._schema.get("required", ()))

    def encode(self, value: Any, out: payload_pb2.Payload | None = None) -> payload_pb2.Payload:
        p = payload_pb2.Payload() if out is None else out
        to_value(self.to_json(value), p.json)
        return p

    def decode(self, payload: payload_pb2.Payload) -> Any:
        if payload.WhichOneof("kind") != "json":
            raise InvalidArgument(f"expected a JSON payload, got {payload.WhichOneof('kind') or 'nothing'}")
        return self.from_json(from_value(payload.json))

    def to_json(self, value: Any) -> Any:
        if _plain(value):
            return value
        return self.adapter.dump_python(value, mode="json", warnings=False)

    def from_json(self, obj: Any) -> Any:
        if self.strict and not self._exact_flat(obj):
            if self._validator is None:
                import jsonschema

                self._validator = jsonschema.Draft202012Validator(self._schema)
            # Unknown fields first: a misspelled field is reported by its name, not only as
            # the required field it left missing.
            errors = sorted(
                self._validator.iter_errors(obj),
                key=lambda e: (len(e.absolute_path), e.validator != "additionalProperties"),
            )
            if errors:
                raise _schema_error(errors)
        try:
            return self.adapter.validate_python(obj)
        except self._validation_error as e:  # (an import statement per call costs ~1 us)
            details = json.loads(e.json(include_url=False, include_input=False))
            first = details[0] if details else {}
            where = ".".join(str(x) for x in first.get("loc", ()))
            raise InvalidArgument(
                f"invalid value{' at ' + where if where else ''}: {first.get('msg', e)}", details=details
            ) from None

    def json_schema(self) -> dict[str, Any]:
        return self._schema

    def _exact_flat(self, obj: Any) -> bool:
        """True when ``obj`` certainly conforms to a flat object schema (:func:`_flat_object`):
        the hot path of small actions, which then skips the full JSON Schema validation. False
        says nothing: the full validation decides."""
        flat = self._flat
        if flat is None or type(obj) is not dict:
            return False
        for k, v in obj.items():
            want = flat.get(k)
            if want is None or type(v) not in (want if isinstance(want, tuple) else (want,)):
                return False
        return self._required <= obj.keys()


#: JSON Schema scalar types and the Python types of JSON values that are exactly of that type
#: (``bool`` is not an integer, an ``int`` is a number).
_EXACT: dict[str, type | tuple[type, ...]] = {"integer": int, "number": (int, float), "string": str, "boolean": bool}
_PLAIN_KEYWORDS = frozenset({"type", "title", "description", "default"})


def _flat_object(schema: Mapping[str, Any]) -> dict[str, type | tuple[type, ...]] | None:
    """For a closed object schema whose properties are unconstrained scalars (``{"type":
    "integer"}`` and the like, titles and defaults aside): each property's exact Python
    types; None for any other schema."""
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        return None
    if set(schema) - {"type", "properties", "required", "additionalProperties", "title", "description"}:
        return None
    props = schema.get("properties")
    if not isinstance(props, dict):
        return None
    out: dict[str, type | tuple[type, ...]] = {}
    for name, sub in props.items():
        if not isinstance(sub, dict) or set(sub) - _PLAIN_KEYWORDS or sub.get("type") not in _EXACT:
            return None
        out[name] = _EXACT[sub["type"]]
    return out


def pydantic_compatible(tp: Any) -> Any:
    """``tp`` as pydantic accepts it on every supported Python: a ``typing.TypedDict`` (which
    pydantic refuses before Python 3.12) is rebuilt as a ``typing_extensions.TypedDict`` with
    the same name, fields, totality and docstring."""
    import sys
    import typing

    if sys.version_info >= (3, 12) or not typing.is_typeddict(tp) or type(tp).__module__ != "typing":
        return tp
    import typing_extensions

    hints = typing.get_type_hints(tp, include_extras=True)
    fields = {k: pydantic_compatible(v) for k, v in hints.items()}
    required = getattr(tp, "__required_keys__", frozenset(fields))
    annotations = {k: (v if k in required else typing_extensions.NotRequired[v]) for k, v in fields.items()}
    make_typeddict: Any = typing_extensions.TypedDict  # the functional form, with a computed name
    rebuilt = make_typeddict(tp.__name__, annotations)
    rebuilt.__doc__ = tp.__doc__
    rebuilt.__module__ = tp.__module__
    return rebuilt


_CACHE: dict[Any, Codec] = {}

# Codecs of declared types that a module above this one understands (openenv.runtime.betterproto:
# betterproto2 dataclasses), registered by it when imported (openenv.runtime imports it), so that
# this module never imports it back.
_DECLARATION_CODECS: list[tuple[Callable[[Any], bool], Callable[[Any], Codec]]] = []


def register_declaration_codec(claims: Callable[[Any], bool], make: Callable[[Any], Codec]) -> None:
    """Make :func:`codec_for` build ``make(declared)`` for every declared type that ``claims``
    (consulted after the built-in kinds, before the pydantic fallback)."""
    _DECLARATION_CODECS.append((claims, make))


def codec_for(declared: Any, *, lenient: bool = False) -> Codec:
    """The codec of a declared type (cached: built once per type per process). ``lenient``:
    a Python type's values are parsed in pydantic's lax mode (an environment's
    ``lenient_actions``); every other kind of declaration is validated as declared."""
    key: Any = json.dumps(declared, sort_keys=True) if isinstance(declared, Mapping) else declared
    if lenient:
        key = ("lenient", key)
    try:
        hit = _CACHE.get(key)
    except TypeError:  # unhashable declaration
        hit, key = None, None
    if hit is not None:
        return hit
    if declared is None:
        codec: Codec = Codec()
    elif isinstance(declared, Codec):
        codec = declared
    elif isinstance(declared, TensorSpec):
        codec = TensorCodec(declared)
    elif isinstance(declared, Mapping):
        codec = SchemaCodec(declared)
    elif isinstance(declared, type) and issubclass(declared, Message):
        codec = MessageCodec(declared)
    elif hasattr(declared, "__openenv_proto__"):
        codec = AdaptedCodec(declared)
    else:
        codec = next((make(declared) for claims, make in _DECLARATION_CODECS if claims(declared)), None) or (
            PydanticCodec(declared, strict=not lenient)
        )
    if key is not None:
        _CACHE[key] = codec
    return codec


def message_class(info_descriptors: descriptor_pb2.FileDescriptorSet, full_name: str) -> type[Message]:
    """The class of ``full_name``: the installed one when importable, else one built from the
    advertised descriptors (so typed payloads decode with no precompiled stubs)."""
    from google.protobuf import descriptor_pool

    try:
        return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))
    except KeyError:
        pass
    pool = descriptor_pool.DescriptorPool()
    for f in info_descriptors.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))
