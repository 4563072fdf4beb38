"""Hypothesis strategies built only from what an environment declares.

* typed actions: walked from the advertised descriptors (scalars, enums, repeated fields,
  maps, real oneofs, proto3 ``optional`` presence, nested messages up to a depth, and the
  well-known types), since no hypothesis-protobuf works with protobuf 7;
* JSON actions: from the declared JSON Schema (:mod:`openenv_conformance.schemagen`), every
  generated value re-validated with ``jsonschema`` (the validator servers use);
* tensor actions: ``hypothesis.extra.numpy`` arrays of the declared dtype, shape and bounds;
* tool calls (as side calls, or as ``openenv.v1.CallToolRequest`` step actions): a tool of
  the advertised list with arguments from its ``input_schema``.

Declared examples (``TypeSpec.examples``) always come first. Invalid actions are built by
breaking valid ones in one way at a time (wrong payload kind, ``Any`` of the wrong type,
undecodable bytes, missing/extra/wrongly typed field, bad tensor) and kept only when they
are really invalid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jsonschema
import numpy as np
from google.protobuf import any_pb2, duration_pb2, json_format, message_factory, struct_pb2, timestamp_pb2, wrappers_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf.message import DecodeError, Message
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from openenv.v1 import payload_pb2, tool_pb2
from openenv.values import from_struct, to_struct, to_value
from openenv_conformance.schemagen import from_schema
from openenv_conformance.spec import DTYPES, EnvSpec, TypeInfo, decode_payload, message_json

__all__ = [
    "CALL_TOOL",
    "Action",
    "ActionSpace",
    "JSON_MAX_INT",
    "invalid_json_for",
    "json_safe",
    "json_payload",
    "json_values",
    "message_strategy",
    "pack",
    "payload_label",
    "schema_values",
    "struct_message",
]

JSON_MAX_INT = 2**53
_FD = _descriptor.FieldDescriptor
_TYPE_PREFIX = "type.googleapis.com/"


def json_safe(v: Any) -> bool:
    """True when ``v`` survives ``google.protobuf.Value`` unchanged (ints within 2^53,
    finite floats, string keys)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return True
    if isinstance(v, int):
        return -JSON_MAX_INT <= v <= JSON_MAX_INT
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(json_safe(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and json_safe(x) for k, x in v.items())
    return False


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value that travels exactly as a ``google.protobuf.Value``."""
    leaf = (
        st.none()
        | st.booleans()
        | st.integers(-JSON_MAX_INT, JSON_MAX_INT)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=16)
    )
    return st.recursive(
        leaf,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=max_leaves,
    )


def _compact(v: Any, limit: int = 200) -> str:
    s = json.dumps(v, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return s if len(s) <= limit else s[:limit] + "..."


#: :attr:`Action.json` of an action that is a payload.
NO_JSON: Any = type("NoJson", (), {"__repr__": lambda self: "NO_JSON"})()


class Action:
    """A step action: the payload sent and a readable label (its ``repr``, which is what a
    minimal failing example shows).

    An action of OpenEnv's JSON protocol that no payload expresses (an invalid JSON action
    sent over a WebSocket) has ``json`` set to the raw ``data`` of its step frame (and an
    unset payload); otherwise ``json`` is :data:`NO_JSON`.
    """

    __slots__ = ("json", "label", "payload")

    def __init__(self, payload: payload_pb2.Payload, label: str, json: Any = NO_JSON) -> None:
        self.payload = payload
        self.label = label
        self.json = json

    def __repr__(self) -> str:
        return self.label

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis' pretty printer
        p.text(self.label)


def payload_label(p: payload_pb2.Payload, cls: type[Message] | None = None) -> str:
    """A compact rendering of a payload."""
    kind = p.WhichOneof("kind")
    if kind is None:
        return "<unset payload>"
    v = decode_payload(p, cls)
    if kind == "message":
        name = p.message.type_url.rsplit("/", 1)[-1]
        body = {k: x for k, x in v.items() if k != "@type"}
        return f"{name}{_compact(body)}"
    if kind == "tensor":
        return f"tensor{_compact(v)}"
    return _compact(v)


# --------------------------------------------------------------------------- JSON Schema


def schema_values(schema: dict[str, Any]) -> st.SearchStrategy[Any] | None:
    """Values valid under ``schema`` (re-validated), or None when it cannot be generated."""
    if not schema:
        return json_values()
    try:
        base = from_schema(schema)
    except (ValueError, jsonschema.SchemaError):
        return None
    return base.filter(json_safe)


_WRONG_TYPE_SAMPLES: dict[str, Any] = {
    "string": "not-a-number",
    "integer": 7,
    "number": 1.5,
    "boolean": True,
    "null": None,
    "array": [1, "x"],
    "object": {"unexpected": 1},
}


def _types_of(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return set(t)
    return set()


#: Values a lax parser coerces to the type named (pydantic's lax mode: ``"7"`` and ``true`` to
#: an integer, ``1`` to a boolean...). A strict environment refuses them (RFC 0007: no silent
#: coercion); one declaring ``Capabilities.lenient_actions`` may accept them.
_COERCIBLE_SAMPLES: dict[str, list[Any]] = {
    "integer": ["7", True],
    "number": ["1.5", True],
    "boolean": [1, "true"],
    "string": [],
}
#: The wrong values no parser coerces to a scalar (sent to lenient environments too).
_NEVER_COERCED = (None, [1, "x"], {"unexpected": 1})


def _wrong_values(prop_schema: Any, lenient: bool = False) -> list[Any]:
    allowed = _types_of(prop_schema)
    if not allowed:
        return list(_WRONG_TYPE_SAMPLES.values())
    if "number" in allowed:
        allowed |= {"integer"}
    out = [v for t, v in _WRONG_TYPE_SAMPLES.items() if t not in allowed]
    if lenient:
        return [v for v in out if any(v == x and type(v) is type(x) for x in _NEVER_COERCED)]
    for t in allowed:
        out += [v for v in _COERCIBLE_SAMPLES.get(t, []) if not any(v == x and type(v) is type(x) for x in out)]
    return out


def invalid_json_for(
    schema: dict[str, Any], valid: st.SearchStrategy[Any], *, lenient: bool = False
) -> st.SearchStrategy[tuple[str, Any]] | None:
    """(what was broken, value) pairs that violate ``schema``, each derived from a valid value
    by one change: a missing required property, an extra property where none are allowed, a
    property of the wrong type, or a top-level value of the wrong type."""
    if not schema:
        return None
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_cls(schema)
    options: list[st.SearchStrategy[tuple[str, Any]]] = []
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)]
    objects = valid.filter(lambda v: isinstance(v, dict))
    if required:
        options.append(
            st.tuples(objects, st.sampled_from(required)).map(
                lambda vk: (f"missing required property {vk[1]!r}", {k: x for k, x in vk[0].items() if k != vk[1]})
            )
        )
    if schema.get("additionalProperties") is False and not lenient:
        options.append(
            st.tuples(objects, st.sampled_from(["zz_extra", "unexpected_field"])).map(
                lambda vk: (f"extra property {vk[1]!r}", {**vk[0], vk[1]: 1})
            )
        )
    if props:
        pairs = [(name, bad) for name in sorted(props) for bad in _wrong_values(props[name], lenient)]
        if pairs:
            options.append(
                st.tuples(objects, st.sampled_from(pairs)).map(
                    lambda vp: (f"property {vp[1][0]!r} of the wrong type", {**vp[0], vp[1][0]: vp[1][1]})
                )
            )
    top = _wrong_values(schema, lenient)
    if top:
        options.append(st.sampled_from(top).map(lambda v: ("a value of the wrong type", v)))
    if not options:
        return None
    return st.one_of(options).filter(lambda lv: json_safe(lv[1]) and not validator.is_valid(lv[1]))


# --------------------------------------------------------------------------- protobuf

_INT_RANGES = {
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_FIXED32: (0, 2**32 - 1),
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1),
    _FD.TYPE_FIXED64: (0, 2**64 - 1),
}
# The wrapper types, each with its typed constructor (the default pool's class; converted to the
# target's class by _convert).
_WRAPPERS: dict[str, Callable[[Any], Message]] = {
    "google.protobuf.DoubleValue": lambda v: wrappers_pb2.DoubleValue(value=v),
    "google.protobuf.FloatValue": lambda v: wrappers_pb2.FloatValue(value=v),
    "google.protobuf.Int64Value": lambda v: wrappers_pb2.Int64Value(value=v),
    "google.protobuf.UInt64Value": lambda v: wrappers_pb2.UInt64Value(value=v),
    "google.protobuf.Int32Value": lambda v: wrappers_pb2.Int32Value(value=v),
    "google.protobuf.UInt32Value": lambda v: wrappers_pb2.UInt32Value(value=v),
    "google.protobuf.BoolValue": lambda v: wrappers_pb2.BoolValue(value=v),
    "google.protobuf.StringValue": lambda v: wrappers_pb2.StringValue(value=v),
    "google.protobuf.BytesValue": lambda v: wrappers_pb2.BytesValue(value=v),
}


def _convert(cls: type[Message]) -> Callable[[Message], Message]:
    """Re-create a default-pool message as an instance of ``cls`` (same type, maybe another pool)."""
    return lambda m: cls.FromString(m.SerializeToString())


def _scalar(f: _descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
    t = f.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.integers(lo, hi)
    if t == _FD.TYPE_DOUBLE:
        return st.floats(allow_nan=False, allow_infinity=False)
    if t == _FD.TYPE_FLOAT:
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if t == _FD.TYPE_BOOL:
        return st.booleans()
    if t == _FD.TYPE_STRING:
        return st.text(max_size=16)
    if t == _FD.TYPE_BYTES:
        return st.binary(max_size=16)
    if t == _FD.TYPE_ENUM and f.enum_type is not None:
        return st.sampled_from([v.number for v in f.enum_type.values])
    raise ValueError(f"no strategy for field {f.full_name} of type {t}")


def message_strategy(cls: type[Message], max_depth: int = 3) -> st.SearchStrategy[Message]:
    """Instances of ``cls``, built field by field from its descriptor."""
    cache: dict[tuple[str, int], st.SearchStrategy[Message]] = {}

    def cls_of(d: _descriptor.Descriptor) -> type[Message]:
        return message_factory.GetMessageClass(d)

    def wkt(d: _descriptor.Descriptor) -> st.SearchStrategy[Message] | None:
        c = cls_of(d)
        name = d.full_name
        if name == "google.protobuf.Struct":
            return (
                st.dictionaries(st.text(max_size=8), json_values(4), max_size=3)
                .map(lambda v: to_struct(v))
                .map(_convert(c))
            )
        if name == "google.protobuf.Value":
            return json_values(4).map(lambda v: to_value(v)).map(_convert(c))
        if name == "google.protobuf.ListValue":
            return st.lists(json_values(3), max_size=3).map(lambda v: to_value(v).list_value).map(_convert(c))
        if name in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
            # Built as the default pool's class (typed constructor), then converted to ``c``, which
            # may be another pool's class of the same type (the server's descriptors).
            time_cls = duration_pb2.Duration if name == "google.protobuf.Duration" else timestamp_pb2.Timestamp
            return st.builds(
                lambda s, n: time_cls(seconds=s, nanos=n), st.integers(0, 10**9), st.integers(0, 999_999_999)
            ).map(_convert(c))
        if name == "google.protobuf.Any":

            def pack(v: dict[str, Any]) -> Message:
                a = any_pb2.Any()
                a.Pack(to_struct(v))
                return a

            return st.dictionaries(st.text(max_size=8), json_values(3), max_size=2).map(pack).map(_convert(c))
        if name in _WRAPPERS:
            return _scalar(d.fields_by_name["value"]).map(_WRAPPERS[name]).map(_convert(c))
        if name in ("google.protobuf.Empty", "google.protobuf.FieldMask"):
            return st.just(c())
        return None

    def msg(d: _descriptor.Descriptor, depth: int) -> st.SearchStrategy[Message]:
        key = (d.full_name, depth)
        if key in cache:
            return cache[key]
        special = wkt(d)
        if special is not None:
            cache[key] = special
            return special
        c = cls_of(d)
        if depth >= max_depth:
            cache[key] = st.just(c())
            return cache[key]
        oneofs = [
            o for o in d.oneofs if not (len(o.fields) == 1 and o.fields[0].has_presence and o.name.startswith("_"))
        ]
        in_oneof = {f.name for o in oneofs for f in o.fields}

        def value_of(f: _descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
            if f.type == _FD.TYPE_MESSAGE and f.message_type is not None:
                return msg(f.message_type, depth + 1)
            return _scalar(f)

        def tagged(f: _descriptor.FieldDescriptor) -> st.SearchStrategy[tuple[_descriptor.FieldDescriptor, Any]]:
            return value_of(f).map(lambda v: (f, v))

        plans: list[tuple[str, Any, st.SearchStrategy[Any]]] = []
        for f in d.fields:
            if f.name in in_oneof:
                continue
            mt = f.message_type
            if mt is not None and mt.GetOptions().map_entry:
                kf, vf = mt.fields_by_name["key"], mt.fields_by_name["value"]
                plans.append(("map", f, st.dictionaries(_scalar(kf), value_of(vf), max_size=3)))
            elif f.is_repeated:
                plans.append(("repeated", f, st.lists(value_of(f), max_size=3)))
            elif f.type == _FD.TYPE_MESSAGE or f.has_presence:
                plans.append(("optional", f, st.none() | value_of(f)))
            else:
                plans.append(("scalar", f, value_of(f)))
        oneof_plans = [st.one_of(st.just(None), *[tagged(f) for f in o.fields]) for o in oneofs]

        @st.composite
        def make(draw: Any) -> Message:
            m = c()
            for how, f, s in plans:
                v = draw(s)
                _set(m, how, f, v)
            for s in oneof_plans:
                picked = draw(s)
                if picked is not None:
                    f, v = picked
                    _set(m, "optional", f, v)
            return m

        build = make()
        cache[key] = build
        return build

    root = cls.DESCRIPTOR
    if not isinstance(root, _descriptor.Descriptor):  # upb's descriptors are instances of it too
        raise TypeError(f"{cls!r} has no message descriptor")
    return msg(root, 0)


def _set(m: Message, how: str, f: _descriptor.FieldDescriptor, v: Any) -> None:
    if v is None:
        return
    if how == "map":
        target = getattr(m, f.name)
        for k, x in v.items():
            if isinstance(x, Message):
                target[k].CopyFrom(x)
            else:
                target[k] = x
    elif how == "repeated":
        target = getattr(m, f.name)
        for x in v:
            if isinstance(x, Message):
                target.add().CopyFrom(x)
            else:
                target.append(x)
    elif isinstance(v, Message):
        getattr(m, f.name).CopyFrom(v)
    else:
        setattr(m, f.name, v)


def pack(msg: Message, type_name: str | None = None) -> payload_pb2.Payload:
    """A Payload holding ``msg`` as an ``Any``."""
    p = payload_pb2.Payload()
    p.message.type_url = _TYPE_PREFIX + (type_name or msg.DESCRIPTOR.full_name)
    p.message.value = msg.SerializeToString()
    return p


# --------------------------------------------------------------------------- tensors


def _tensor_arrays(ts: payload_pb2.TensorSpec) -> st.SearchStrategy[np.ndarray] | None:
    dt = DTYPES.get(ts.dtype)
    if dt is None:
        return None
    shape = st.tuples(*[st.integers(0, 3) if d < 0 else st.just(int(d)) for d in ts.shape])
    lo = ts.minimum if ts.HasField("minimum") else None
    hi = ts.maximum if ts.HasField("maximum") else None
    if dt.kind == "f":
        width: Literal[16, 32, 64] = 16 if dt.itemsize == 2 else 32 if dt.itemsize == 4 else 64
        elements = st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False, width=width)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        lo_i = info.min if lo is None else max(info.min, math.ceil(lo))
        hi_i = info.max if hi is None else min(info.max, math.floor(hi))
        if lo_i > hi_i:
            return None
        elements = st.integers(lo_i, hi_i)
    else:
        elements = st.booleans()
    arrays = hnp.arrays(dt, shape, elements=elements)
    if ts.element_minimum or ts.element_maximum:  # each element in its own bounds
        n = math.prod(int(d) for d in ts.shape)
        low = np.asarray(ts.element_minimum or [-math.inf] * n, dtype=np.float64)
        high = np.asarray(ts.element_maximum or [math.inf] * n, dtype=np.float64)
        if low.size != n or high.size != n or (low > high).any():
            return None
        if dt.kind in "iu":
            info = np.iinfo(dt)
            low = np.clip(np.ceil(low), info.min, info.max)
            high = np.clip(np.floor(high), info.min, info.max)
            if (low > high).any():
                return None
        fixed = tuple(int(d) for d in ts.shape)

        def clip(arr: np.ndarray) -> np.ndarray:
            return np.clip(arr.reshape(-1).astype(np.float64), low, high).astype(dt).reshape(fixed)

        arrays = hnp.arrays(dt, fixed, elements=elements).map(clip)
    return arrays


def _tensor_payload(arr: np.ndarray, dtype_code: payload_pb2.DType) -> payload_pb2.Payload:
    p = payload_pb2.Payload()
    p.tensor.dtype = dtype_code
    p.tensor.shape[:] = list(arr.shape)
    p.tensor.data = np.ascontiguousarray(arr).tobytes()
    return p


# --------------------------------------------------------------------------- actions

CALL_TOOL = "openenv.v1.CallToolRequest"


def _named(name: str, args: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) pairs."""
    return args.map(lambda a: (name, a))


def _named_invalid(
    name: str, bad: st.SearchStrategy[tuple[str, Any]]
) -> st.SearchStrategy[tuple[str, str, dict[str, Any]]]:
    """(tool name, what was broken, arguments) triples, for argument objects only."""
    return bad.filter(lambda lv: isinstance(lv[1], dict)).map(lambda lv: (name, lv[0], lv[1]))


class ActionSpace:
    """Valid and invalid step actions of one environment, and tool-call arguments.

    ``json_actions`` (the target speaks OpenEnv's JSON frames): valid actions are still
    payloads (sent as their canonical JSON), but invalid ones are JSON values that break the
    declared type, since payload-level breakage (kinds, ``Any`` types, bytes) cannot travel
    as JSON.
    """

    def __init__(self, spec: EnvSpec, tools: Sequence[tool_pb2.Tool] = (), *, json_actions: bool = False) -> None:
        self.spec = spec
        self.json_actions = json_actions
        self.type: TypeInfo = spec.action
        self.tools = list(tools)
        self.examples = [
            Action(p, f"example[{i}] {payload_label(p, self.type.cls)}") for i, p in enumerate(self.type.examples)
        ]
        self._valid: st.SearchStrategy[Action] | None = None

    # -- tool arguments

    def tool_arguments(self, tool: tool_pb2.Tool) -> st.SearchStrategy[dict[str, Any]] | None:
        schema = from_struct(tool.input_schema) if tool.HasField("input_schema") else {}
        s = schema_values(schema or {"type": "object"})
        return None if s is None else s.filter(lambda v: isinstance(v, dict))

    def tool_calls(self) -> st.SearchStrategy[tuple[str, dict[str, Any]]] | None:
        """(tool name, valid arguments) for the advertised tools."""
        per_tool = [(t.name, self.tool_arguments(t)) for t in self.tools]
        options = [_named(n, s) for n, s in per_tool if s is not None]
        return st.one_of(options) if options else None

    def invalid_tool_calls(self) -> st.SearchStrategy[tuple[str, str, dict[str, Any]]] | None:
        """(tool name, what was broken, arguments violating its input_schema)."""
        options = []
        for t in self.tools:
            schema = from_struct(t.input_schema) if t.HasField("input_schema") else {}
            valid = self.tool_arguments(t)
            if valid is None:
                continue
            bad = invalid_json_for(schema, valid)
            if bad is not None:
                options.append(_named_invalid(t.name, bad))
        return st.one_of(options) if options else None

    # -- valid actions

    def _generated(self) -> st.SearchStrategy[Action] | None:
        t = self.type
        if t.kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
            if t.cls is None:
                return None
            if t.message_type == CALL_TOOL and self.tools:
                calls = self.tool_calls()
                if calls is None:
                    return None
                cls = t.cls

                def to_action(call: tuple[str, dict[str, Any]]) -> Action:
                    m = tool_pb2.CallToolRequest(name=call[0])
                    to_struct(call[1], m.arguments)
                    p = pack(m, t.message_type)
                    return Action(p, payload_label(p, cls))

                return calls.map(to_action)
            cls = t.cls
            return (
                message_strategy(cls)
                .map(lambda m: pack(m, t.message_type))
                .map(lambda p: Action(p, payload_label(p, cls)))
            )
        if t.kind == payload_pb2.PAYLOAD_KIND_JSON or not t.declared:
            values = schema_values(t.schema) if t.declared else json_values()
            if values is None:
                return None

            def json_action(v: Any) -> Action:
                p = payload_pb2.Payload()
                to_value(v, p.json)
                return Action(p, payload_label(p))

            return values.map(json_action)
        if t.kind == payload_pb2.PAYLOAD_KIND_TENSOR:
            arrays = _tensor_arrays(t.spec.tensor)
            if arrays is None:
                return None
            code = t.spec.tensor.dtype
            return arrays.map(lambda a: _tensor_payload(a, code)).map(lambda p: Action(p, payload_label(p)))
        return None

    def valid(self) -> st.SearchStrategy[Action] | None:
        """Declared examples first, then generated actions; None when there is neither."""
        if self._valid is None:
            parts: list[st.SearchStrategy[Action]] = []
            if self.examples:
                parts.append(st.sampled_from(self.examples))
            gen = self._generated()
            if gen is not None:
                parts.append(gen)
            self._valid = st.one_of(parts) if parts else st.nothing()
        return None if self._valid.is_empty else self._valid

    def episodes(self, max_size: int | None = None) -> st.SearchStrategy[list[Action]]:
        """Action sequences of at most the action budget."""
        v = self.valid()
        n = self.spec.budget if max_size is None else max_size
        return st.lists(v, max_size=n) if v is not None else st.just([])

    # -- invalid actions

    def invalid(self) -> st.SearchStrategy[Action] | None:
        """Actions the error table says are INVALID_ARGUMENT; None when nothing is invalid
        (the action type is not declared)."""
        t = self.type
        if not t.declared:
            return None
        if self.json_actions:
            return self._invalid_json()
        options: list[st.SearchStrategy[Action]] = [st.just(Action(payload_pb2.Payload(), "<unset payload>"))]
        wrong_kinds = []
        if t.kind != payload_pb2.PAYLOAD_KIND_JSON:
            wrong_kinds.append(
                Action(
                    payload_pb2.Payload(json=to_value({"not": "a json action"})),
                    'wrong payload kind: json {"not":"a json action"}',
                )
            )
        if t.kind != payload_pb2.PAYLOAD_KIND_TENSOR:
            wrong_kinds.append(
                Action(
                    _tensor_payload(np.zeros(2, "<f4"), payload_pb2.D_TYPE_FLOAT32),
                    "wrong payload kind: float32 tensor [0,0]",
                )
            )
        if t.kind != payload_pb2.PAYLOAD_KIND_MESSAGE:
            wrong_kinds.append(
                Action(
                    pack(to_struct({"not": "a message action"})), "wrong payload kind: message google.protobuf.Struct"
                )
            )
        options.append(st.sampled_from(wrong_kinds))
        if t.kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
            options += self._invalid_messages()
        elif t.kind == payload_pb2.PAYLOAD_KIND_JSON:
            values = schema_values(t.schema)
            lenient = self.spec.caps.lenient_actions
            bad = invalid_json_for(t.schema, values, lenient=lenient) if values is not None else None
            if bad is not None:

                def json_bad(lv: tuple[str, Any]) -> Action:
                    p = payload_pb2.Payload()
                    to_value(lv[1], p.json)
                    return Action(p, f"{lv[0]}: {payload_label(p)}")

                options.append(bad.map(json_bad))
        elif t.kind == payload_pb2.PAYLOAD_KIND_TENSOR:
            options.append(self._invalid_tensors())
        return st.one_of(options)

    def _invalid_messages(self) -> list[st.SearchStrategy[Action]]:
        t = self.type
        out: list[st.SearchStrategy[Action]] = []
        other = "google.protobuf.Struct" if t.message_type != "google.protobuf.Struct" else "google.protobuf.Value"

        def wrong_type(name: str) -> Action:
            p = payload_pb2.Payload()
            p.message.type_url = _TYPE_PREFIX + name
            p.message.value = to_struct({"k": 1}).SerializeToString() if name.startswith("google.") else b""
            return Action(p, f"Any of the wrong type: {name}")

        out.append(st.sampled_from([other, "conformance.NotTheActionType"]).map(wrong_type))
        cls = t.cls
        if cls is not None:

            def undecodable(b: bytes) -> bool:
                try:
                    cls.FromString(b)
                except DecodeError:
                    return True
                return False

            def garbage(b: bytes) -> Action:
                p = payload_pb2.Payload()
                p.message.type_url = _TYPE_PREFIX + t.message_type
                p.message.value = b
                return Action(p, f"undecodable {t.message_type} bytes: {b.hex()}")

            out.append(
                (st.sampled_from([b"\xff", b"\x0a\xff", b"\x08\x80\x80\x80"]) | st.binary(min_size=1, max_size=32))
                .filter(undecodable)
                .map(garbage)
            )
            if t.message_type == CALL_TOOL and self.tools:
                bad = self.invalid_tool_calls()
                if bad is not None:

                    def bad_call(nla: tuple[str, str, dict[str, Any]]) -> Action:
                        m = tool_pb2.CallToolRequest(name=nla[0])
                        to_struct(nla[2], m.arguments)
                        p = pack(m, t.message_type)
                        return Action(p, f"tool arguments with {nla[1]}: {payload_label(p, cls)}")

                    out.append(bad.map(bad_call))
        return out

    def _invalid_json(self) -> st.SearchStrategy[Action] | None:
        """Invalid actions of the JSON protocol (``step`` frame ``data``), each breaking the
        declared type one way; None when no JSON value breaks it."""
        t = self.type

        def raw(label: str, value: Any) -> Action:
            return Action(payload_pb2.Payload(), f"{label}: {_compact(value)}", json=value)

        options: list[st.SearchStrategy[Action]] = []
        if t.kind == payload_pb2.PAYLOAD_KIND_JSON:
            values = schema_values(t.schema)
            lenient = self.spec.caps.lenient_actions
            bad = invalid_json_for(t.schema, values, lenient=lenient) if values is not None else None
            if bad is not None:
                options.append(bad.map(lambda lv: raw(lv[0], lv[1])))
        elif t.kind == payload_pb2.PAYLOAD_KIND_MESSAGE and t.message_type == CALL_TOOL:
            cases = [
                raw("call_tool without tool_name", {"type": "call_tool", "arguments": {}}),
                raw(
                    "call_tool whose arguments are not an object",
                    {"type": "call_tool", "tool_name": self.tools[0].name if self.tools else "x", "arguments": [1, 2]},
                ),
                raw("not an object", [1, 2]),
            ]
            options.append(st.sampled_from(cases))
            calls = self.invalid_tool_calls()
            if calls is not None:
                options.append(
                    calls.map(
                        lambda nla: raw(
                            f"tool arguments with {nla[1]}",
                            {"type": "call_tool", "tool_name": nla[0], "arguments": nla[2]},
                        )
                    )
                )
        elif t.kind == payload_pb2.PAYLOAD_KIND_MESSAGE and t.cls is not None:
            options.append(self._invalid_message_json(t.cls))
        elif t.kind == payload_pb2.PAYLOAD_KIND_TENSOR:
            rank = len(t.spec.tensor.shape)
            deeper: Any = 0
            for _ in range(rank + 1):
                deeper = [deeper, deeper]
            cases = [raw("not an array", "not-a-tensor"), raw(f"an array of rank {rank + 1}", deeper)]
            if rank:
                cases.append(raw("a ragged array", [[0], [0, 0]] if rank > 1 else [[0], 0]))
            options.append(st.sampled_from(cases))
        return st.one_of(options) if options else None

    def _invalid_message_json(self, cls: type[Message]) -> st.SearchStrategy[Action]:
        """JSON the proto3 JSON mapping of ``cls`` rejects: a non-object, an unknown field,
        or a field of the wrong JSON type (each checked to really fail to parse)."""
        t = self.type

        def rejected(v: Any) -> bool:
            try:
                json_format.ParseDict(v, cls())
            except (json_format.ParseError, TypeError, ValueError):
                return True
            return False

        valid = message_strategy(cls).map(lambda m: message_json(m, proto_names=True))
        field_names = [f.name for f in cls.DESCRIPTOR.fields]
        wrong: list[tuple[str, Any]] = []
        for f in cls.DESCRIPTOR.fields:
            if f.is_repeated:
                wrong.append((f.name, 7))
            elif f.cpp_type == _FD.CPPTYPE_MESSAGE:
                wrong += [(f.name, 7), (f.name, "not-a-message")]
            elif f.cpp_type == _FD.CPPTYPE_STRING:
                wrong += [(f.name, 7), (f.name, {"not": "a string"})]
            elif f.cpp_type == _FD.CPPTYPE_BOOL:
                wrong += [(f.name, "not-a-bool"), (f.name, [True])]
            elif f.cpp_type == _FD.CPPTYPE_ENUM:
                wrong += [(f.name, "CONFORMANCE_NO_SUCH_VALUE"), (f.name, [1])]
            else:
                wrong += [(f.name, "not-a-number"), (f.name, {"n": 1})]
        unknown = next(n for n in ("conformance_unknown_field", "conformance_unknown_field_2") if n not in field_names)
        options: list[st.SearchStrategy[Action]] = [
            st.sampled_from([[1, 2], "not-an-object", 7]).map(
                lambda v: Action(payload_pb2.Payload(), f"not a {t.message_type} object: {_compact(v)}", json=v)
            ),
            valid.map(
                lambda d: Action(
                    payload_pb2.Payload(),
                    f"unknown field {unknown!r}: {_compact({**d, unknown: 1})}",
                    json={**d, unknown: 1},
                )
            ),
        ]
        if wrong:
            options.append(
                st.tuples(valid, st.sampled_from(wrong)).map(
                    lambda dw: Action(
                        payload_pb2.Payload(),
                        f"field {dw[1][0]!r} of the wrong JSON type: {_compact({**dw[0], dw[1][0]: dw[1][1]})}",
                        json={**dw[0], dw[1][0]: dw[1][1]},
                    )
                )
            )
        return st.one_of(options).filter(lambda a: rejected(a.json))

    def _invalid_tensors(self) -> st.SearchStrategy[Action]:
        ts = self.type.spec.tensor
        code = ts.dtype or payload_pb2.D_TYPE_FLOAT32
        fixed = [d if d >= 0 else 2 for d in ts.shape]
        dt = DTYPES.get(code, np.dtype("<f4"))
        n = math.prod(fixed)
        good = np.zeros(fixed, dtype=dt)
        cases: list[Action] = []

        def t(label: str, dtype: payload_pb2.DType, shape: Sequence[int], data: bytes) -> None:
            p = payload_pb2.Payload()
            p.tensor.dtype = dtype
            p.tensor.shape[:] = list(shape)
            p.tensor.data = data
            cases.append(Action(p, f"bad tensor: {label}"))

        t("dtype unspecified", payload_pb2.D_TYPE_UNSPECIFIED, fixed, good.tobytes())
        t("negative shape entry", code, [-1, *fixed], good.tobytes())
        t("data one byte short", code, fixed, good.tobytes()[:-1] if n else b"\x00")
        t("data one element too long", code, fixed, good.tobytes() + bytes(dt.itemsize))
        other = payload_pb2.D_TYPE_INT8 if code != payload_pb2.D_TYPE_INT8 else payload_pb2.D_TYPE_UINT8
        t("wrong dtype", other, fixed, bytes(n * DTYPES[other].itemsize))
        t("wrong rank", code, [*fixed, 1, 1], good.tobytes())
        if ts.HasField("maximum") and dt.kind == "f" and math.isfinite(ts.maximum) and n:
            big = np.full(fixed, ts.maximum * 2 + 1, dtype=dt)
            t("element above the declared maximum", code, fixed, big.tobytes())
        return st.sampled_from(cases)


def json_payload(v: Any) -> payload_pb2.Payload:
    p = payload_pb2.Payload()
    to_value(v, p.json)
    return p


def struct_message(v: dict[str, Any]) -> struct_pb2.Struct:
    return to_struct(v)
