"""Payload codecs (openenv.runtime.codec), property-based: JSON values, tensors of every dtype,
and the JSON Schemas derived from message descriptors."""

from __future__ import annotations

import collections
import enum
import math
from typing import Any

import jsonschema
import numpy as np
import pytest
from google.protobuf import descriptor, json_format, struct_pb2
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import openenv
from gridworld.v1 import gridworld_pb2
from openenv.runtime.codec import codec_for, message_json_schema, tensor_from_proto, tensor_to_proto
from openenv.v1 import environment_pb2, payload_pb2, tool_pb2
from openenv.values import from_struct, from_value, to_struct, to_value

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXACT = 2**53

# --------------------------------------------------------------------------- JSON values

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-EXACT, EXACT)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


def expected(x: Any) -> Any:
    """What docs/protocol.md §2.2 promises back: integral numbers as int, other numbers
    as float, tuples as lists."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, float)):
        f = float(x)
        return int(f) if f.is_integer() and -EXACT <= f <= EXACT else f
    if isinstance(x, dict):
        return {k: expected(v) for k, v in x.items()}
    return [expected(v) for v in x]


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0 is not True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@SETTINGS
@given(json_values)
def test_json_values_round_trip_through_the_wire(x: Any) -> None:
    wire = to_value(x).SerializeToString()
    back = from_value(struct_pb2.Value.FromString(wire))
    assert same(back, expected(x)), (x, back)


@SETTINGS
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_structs_round_trip(d: dict[str, Any]) -> None:
    s = struct_pb2.Struct.FromString(to_struct(d).SerializeToString())
    assert same(from_struct(s), expected(d))


def _struct_in_order(items: list[tuple[str, Any]]) -> struct_pb2.Struct:
    """A Struct whose wire bytes hold ``items`` in this order (concatenated messages merge)."""
    return struct_pb2.Struct.FromString(b"".join(to_struct({k: v}).SerializeToString() for k, v in items))


def _sorted_at_every_depth(x: Any) -> bool:
    if isinstance(x, dict):
        return list(x) == sorted(x) and all(_sorted_at_every_depth(v) for v in x.values())
    if isinstance(x, list):
        return all(_sorted_at_every_depth(v) for v in x)
    return True


@SETTINGS
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_a_structs_members_come_back_sorted_at_every_depth_whatever_their_wire_order(d: dict[str, Any]) -> None:
    """upb orders a map's members differently in each process: sorted, an observation or a
    tool's schema reads the same in every process and over every transport."""
    for items in (list(d.items()), list(reversed(d.items()))):
        back = from_struct(_struct_in_order(items))
        assert _sorted_at_every_depth(back) and same(back, expected(d))


def test_anys_holding_maps_in_two_orders_are_canonicalized_to_the_same_bytes() -> None:
    from google.protobuf import any_pb2

    from openenv.runtime.anys import canonicalize_anys

    items = [("path", "a.txt"), ("content", "hi"), ("mode", 420), ("nested", {"y": 1, "x": [{"b": 2, "a": 1}]})]
    packed = []
    for order in (items, items[::-1]):
        spec = payload_pb2.TypeSpec()
        example = spec.examples.add().message
        example.type_url = "type.googleapis.com/openenv.v1.CallToolRequest"
        # The call's bytes written member by member in this order (concatenated messages merge).
        parts = [tool_pb2.CallToolRequest(name="write")]
        parts += [tool_pb2.CallToolRequest(arguments=to_struct({k: v})) for k, v in order]
        example.value = b"".join(p.SerializeToString() for p in parts)
        packed.append(spec)
    assert packed[0] != packed[1]  # the same call, two byte orders: unequal as protobuf compares Anys
    for spec in packed:
        canonicalize_anys(spec)
    assert packed[0] == packed[1]
    back = tool_pb2.CallToolRequest()
    assert packed[0].examples[0].message.Unpack(back) and from_struct(back.arguments) == dict(sorted(items))
    unknown = any_pb2.Any(type_url="type.googleapis.com/nowhere.Unknown", value=b"\x08\x01")
    canonicalize_anys(unknown)  # a type no pool knows: left as it is
    assert unknown.value == b"\x08\x01"


@SETTINGS
@given(json_values)
def test_values_encode_as_protobufs_own_json_parser_does(x: Any) -> None:
    """to_value's fast paths against an independent encoder (json_format.ParseDict), byte for byte."""
    ours = to_value(x).SerializeToString(deterministic=True)
    assert ours == json_format.ParseDict(x, struct_pb2.Value()).SerializeToString(deterministic=True)
    assert from_value(struct_pb2.Value.FromString(ours)) == json_format.MessageToDict(struct_pb2.Value.FromString(ours))


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@pytest.mark.parametrize(
    ("value", "back"),
    [
        (True, True),  # a bool is not a number, either way
        (1, 1),
        (1.0, 1),
        (-0.0, 0),
        (2**53 + 2, float(2**53 + 2)),
        (Color.RED, 1),  # subclasses of the JSON types take the general path, with the same result
        (Name("n"), "n"),
        (collections.OrderedDict(a=1, b=[None]), {"a": 1, "b": [None]}),
        ((1, (True, "x")), [1, [True, "x"]]),
        ({}, {}),
        ([], []),
        ({"a": {"b": {"c": [{}, [], ""]}}}, {"a": {"b": {"c": [{}, [], ""]}}}),
    ],
)
def test_subclasses_and_edge_values_round_trip(value: Any, back: Any) -> None:
    assert same(from_value(struct_pb2.Value.FromString(to_value(value).SerializeToString())), back)
    if isinstance(value, dict):
        assert same(from_struct(struct_pb2.Struct.FromString(to_struct(value).SerializeToString())), back)


def test_numbers_beyond_a_double_are_refused() -> None:
    with pytest.raises((OverflowError, ValueError)):
        to_value(2**1100)
    with pytest.raises(TypeError, match="keys must be strings"):
        to_struct({1: 2})  # type: ignore[dict-item]


def test_integral_numbers_decode_as_int() -> None:
    assert same(from_value(to_value({"x": 1, "y": 2.0, "z": 2.5, "n": -0.0})), {"x": 1, "y": 2, "z": 2.5, "n": 0})
    assert same(from_value(to_value(EXACT)), EXACT)
    big = from_value(to_value(EXACT + 2))  # beyond 2^53 numbers stay floats (not exact)
    assert isinstance(big, float) and big == EXACT + 2
    assert same(from_value(to_value((1, (2, 3)))), [1, [2, 3]])
    assert same(from_value(to_value(np.int64(3))), 3)
    assert same(from_value(to_value(np.array([[1, 2]], dtype=np.uint8))), [[1, 2]])


@pytest.mark.parametrize("bad", [object(), {1: "int key"}, {"k": {2}}, b"bytes"])
def test_values_that_are_not_json_like_are_refused(bad: Any) -> None:
    with pytest.raises(TypeError):
        to_value(bad)


# --------------------------------------------------------------------------- tensors

DTYPES = ["bool", "<i1", "<u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"]


def _root(a: np.ndarray) -> Any:
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


@pytest.mark.parametrize("dtype", DTYPES)
@SETTINGS
@given(data=st.data())
def test_tensors_of_every_dtype_round_trip_as_read_only_views(dtype: str, data: st.DataObject) -> None:
    byteorder = data.draw(st.sampled_from(["<", ">"])) if dtype not in ("bool", "<i1", "<u1") else "<"
    dt = np.dtype(dtype).newbyteorder(byteorder) if byteorder == ">" else np.dtype(dtype)
    arr = data.draw(hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    wire = tensor_to_proto(arr).SerializeToString()
    msg = payload_pb2.Tensor.FromString(wire)
    assert msg.dtype != payload_pb2.D_TYPE_UNSPECIFIED and list(msg.shape) == list(arr.shape)
    back = tensor_from_proto(msg)
    assert back.dtype == np.dtype(dtype) and back.shape == arr.shape
    # bit-exact (NaN payloads and -0.0 included), little-endian on the wire
    assert back.tobytes() == np.ascontiguousarray(arr, dtype=np.dtype(dtype)).tobytes()
    assert not back.flags.writeable
    assert isinstance(_root(back), bytes)  # a view of the message's bytes, not a copy


def test_tensor_scalar_and_non_contiguous_input() -> None:
    t = tensor_to_proto(np.float32(1.5))
    assert list(t.shape) == [] and tensor_from_proto(t).item() == 1.5
    a = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]  # a strided view
    assert tensor_from_proto(tensor_to_proto(a)).tolist() == a.tolist()


@pytest.mark.parametrize(
    "t",
    [
        payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_UNSPECIFIED, shape=[1], data=b"\x00"),
        payload_pb2.Tensor(dtype=99, shape=[1], data=b"\x00"),
        payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_INT32, shape=[2, -1], data=b""),
        payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_INT32, shape=[2], data=b"\x00" * 7),
        payload_pb2.Tensor(dtype=payload_pb2.D_TYPE_INT32, shape=[], data=b""),  # a scalar has one element
    ],
)
def test_tensors_that_break_the_invariant_are_invalid_argument(t: payload_pb2.Tensor) -> None:
    with pytest.raises(openenv.InvalidArgument):
        tensor_from_proto(t)


def test_unsupported_dtypes_are_refused_when_encoding() -> None:
    for bad in (np.array([1 + 2j]), np.array(["s"]), np.array([object()])):
        with pytest.raises(TypeError):
            tensor_to_proto(bad)


def test_tensor_spec_codec_checks_dtype_shape_and_bounds() -> None:
    codec = codec_for(openenv.TensorSpec("uint8", (None, 2), minimum=0, maximum=9))
    spec = codec.spec()
    assert spec.kind == payload_pb2.PAYLOAD_KIND_TENSOR and list(spec.tensor.shape) == [-1, 2]
    good = np.array([[1, 2], [3, 9]], dtype=np.uint8)
    assert codec.decode(codec.encode(good)).tolist() == good.tolist()
    for bad in (np.zeros((2, 3), np.uint8), np.zeros((2, 2), np.int8), np.full((1, 2), 10, np.uint8)):
        with pytest.raises(openenv.InvalidArgument):
            codec.decode(payload_pb2.Payload(tensor=tensor_to_proto(bad)))


# --------------------------------------------------------------------------- message schemas

_FD = descriptor.FieldDescriptor
_INTS = {
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


def _scalar(f: descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
    if f.type in _INTS:
        return st.integers(*_INTS[f.type])
    if f.type == _FD.TYPE_DOUBLE:
        return st.floats()
    if f.type == _FD.TYPE_FLOAT:
        return st.floats(width=32)
    if f.type == _FD.TYPE_BOOL:
        return st.booleans()
    if f.type == _FD.TYPE_STRING:
        return st.text(max_size=10)
    if f.type == _FD.TYPE_BYTES:
        return st.binary(max_size=10)
    if f.type == _FD.TYPE_ENUM:
        return st.sampled_from([v.number for v in f.enum_type.values])
    raise AssertionError(f"no strategy for {f.full_name}")


def messages(cls: type[Message], depth: int = 3) -> st.SearchStrategy[Message]:
    """Messages of ``cls`` with random fields set (WKTs Struct and Duration included)."""
    name = cls.DESCRIPTOR.full_name
    if name == "google.protobuf.Struct":
        return st.dictionaries(st.text(max_size=6), json_values, max_size=3).map(lambda d: to_struct(d))
    if name == "google.protobuf.Duration":

        def dur(ns: int) -> Message:
            m = cls()
            m.FromNanoseconds(ns)
            return m

        return st.integers(0, 10**13).map(dur)

    def field(f: descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            return st.just(None)  # maps are not needed by the messages tested here
        if f.type == _FD.TYPE_MESSAGE:
            if depth == 0:
                return st.just(None)
            one = messages(f.message_type._concrete_class, depth - 1)
        else:
            one = _scalar(f)
        return st.none() | (st.lists(one, max_size=3) if f.is_repeated else one)

    def build(values: dict[str, Any]) -> Message:
        m = cls()
        for fname, v in values.items():
            if v is None:
                continue
            f = cls.DESCRIPTOR.fields_by_name[fname]
            target = getattr(m, fname)
            if f.is_repeated and f.type == _FD.TYPE_MESSAGE:
                for x in v:
                    target.add().CopyFrom(x)
            elif f.is_repeated:
                target.extend(v)
            elif f.type == _FD.TYPE_MESSAGE:
                target.CopyFrom(v)
            else:
                setattr(m, fname, v)
        return m

    return st.fixed_dictionaries({f.name: field(f) for f in cls.DESCRIPTOR.fields}).map(build)


SCHEMA_MESSAGES = [
    gridworld_pb2.Action,
    gridworld_pb2.Position,
    gridworld_pb2.Observation,
    gridworld_pb2.State,
    tool_pb2.CallToolRequest,
    tool_pb2.Tool,
    environment_pb2.ResetRequest,
]


@pytest.mark.parametrize("cls", SCHEMA_MESSAGES, ids=lambda c: c.DESCRIPTOR.full_name)
@SETTINGS
@given(data=st.data())
def test_message_json_schema_accepts_the_canonical_json_mapping(cls: type[Message], data: st.DataObject) -> None:
    schema = message_json_schema(cls.DESCRIPTOR)
    validator = jsonschema.Draft202012Validator(schema)
    msg = data.draw(messages(cls))
    for every_field in (False, True):
        doc = json_format.MessageToDict(msg, always_print_fields_with_no_presence=every_field)
        errors = list(validator.iter_errors(doc))
        assert not errors, (doc, [e.message for e in errors])


def test_message_json_schema_rejects_what_the_mapping_never_produces() -> None:
    Draft = jsonschema.Draft202012Validator  # noqa: N806
    Draft.check_schema(message_json_schema(gridworld_pb2.State.DESCRIPTOR))
    obs = Draft(message_json_schema(gridworld_pb2.Observation.DESCRIPTOR))
    assert obs.is_valid({"agent": {"row": 1, "col": 2}, "grid": ["#.", ".A"], "bumped": False})
    for bad in ({"agent": {"row": "one"}}, {"grid": "#."}, {"bumped": 1}, {"unknown": 1}, {"agent": {"row": 2**31}}):
        assert not obs.is_valid(bad), bad
    action = Draft(message_json_schema(gridworld_pb2.Action.DESCRIPTOR))
    assert action.is_valid({"move": "MOVE_UP"}) and action.is_valid({"move": 2})
    assert not action.is_valid({"move": "MOVE_DIAGONAL"})
    state = Draft(message_json_schema(gridworld_pb2.State.DESCRIPTOR))
    assert state.is_valid({"seed": "18446744073709551615", "totalReward": "NaN"})
    assert not state.is_valid({"seed": "x"})


def test_codec_spec_of_a_message_type_advertises_name_schema_and_descriptors() -> None:
    codec = codec_for(gridworld_pb2.Action)
    spec = codec.spec([gridworld_pb2.Action(move=gridworld_pb2.MOVE_LEFT)])
    assert spec.kind == payload_pb2.PAYLOAD_KIND_MESSAGE and spec.message_type == "gridworld.v1.Action"
    assert json_format.MessageToDict(spec.json_schema) == message_json_schema(gridworld_pb2.Action.DESCRIPTOR)
    ex = gridworld_pb2.Action()
    assert spec.examples[0].message.Unpack(ex) and ex.move == gridworld_pb2.MOVE_LEFT
    assert [d.full_name for d in codec.message_descriptors()] == ["gridworld.v1.Action"]


def test_float_schema_allows_special_values() -> None:
    state = jsonschema.Draft202012Validator(message_json_schema(gridworld_pb2.State.DESCRIPTOR))
    for v in (math.inf, -math.inf, math.nan):
        doc = json_format.MessageToDict(gridworld_pb2.State(total_reward=v))
        assert state.is_valid(doc), doc
