"""openenv.spaces: every space Gymnasium defines goes to the contract's types and comes back
exactly, and so do its values (encoded and decoded as the protocol does)."""

from __future__ import annotations

import inspect
import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, Graph, MultiBinary, MultiDiscrete, OneOf, Sequence, Text, Tuple
from gymnasium.utils.env_checker import data_equivalence

import openenv
from openenv.runtime.codec import codec_for
from openenv.spaces import SpaceError, declaration, space_converter, type_spec
from openenv.v1 import payload_pb2

I64 = np.iinfo(np.int64)

SPACES: dict[str, Any] = {
    "box-uniform": Box(-1.0, 1.0, (3,), np.float32),
    "box-per-dimension": Box(
        np.array([-4.8, -np.inf, -0.42, -np.inf], np.float32), np.array([4.8, np.inf, 0.42, np.inf], np.float32)
    ),
    "box-unbounded-f64": Box(-np.inf, np.inf, (2, 2), np.float64),
    "box-scalar": Box(0.0, 5.0, (), np.float32),
    "box-frame-uint8": Box(0, 255, (6, 5, 3), np.uint8),
    "box-int64-dtype-limits": Box(I64.min, I64.max, (2,), np.int64),
    "box-int16-per-dimension": Box(np.array([-3, 0], dtype=np.int16), np.array([3, 9], dtype=np.int16), dtype=np.int16),
    "discrete": Discrete(5),
    "discrete-start": Discrete(3, start=-1),
    "discrete-wide": Discrete(100_000, start=7),
    "multidiscrete": MultiDiscrete([3, 4, 2]),
    "multidiscrete-2d-start-int32": MultiDiscrete(
        np.array([[2, 3], [4, 5]]), dtype=np.int32, start=np.array([[0, 1], [-2, 3]])
    ),
    "multibinary": MultiBinary(4),
    "multibinary-2d": MultiBinary([2, 3]),
    "text": Text(12),
    "text-charset": Text(8, min_length=2, charset="ab]^-\\[ c"),
    "tuple-blackjack": Tuple((Discrete(32), Discrete(11), Discrete(2))),
    "tuple-mixed": Tuple((Box(-1.0, 1.0, (2,), np.float32), Discrete(4, start=1), Text(5))),
    "dict": Dict(
        {"position": Box(np.array([0.0, -1.0], np.float32), np.array([1.0, 1.0], np.float32)), "n": Discrete(3)}
    ),
    "dict-nested": Dict(
        {
            "grid": MultiBinary([2, 2]),
            "choice": MultiDiscrete([2, 5]),
            "inner": Dict({"t": Tuple((Discrete(2), Box(0, 9, (1,), np.int64)))}),
        }
    ),
    "sequence": Sequence(Discrete(4)),
    "sequence-of-boxes-stacked": Sequence(Box(-1.0, 1.0, (2,), np.float32), stack=True),
    "graph": Graph(node_space=Box(-1.0, 1.0, (3,), np.float32), edge_space=Discrete(3)),
    "graph-without-edges": Graph(node_space=Discrete(4), edge_space=None),
    "oneof": OneOf((Discrete(3), Box(-1.0, 1.0, (2,), np.float32))),
}


def test_the_cases_cover_every_space_gymnasium_defines() -> None:
    defined = {
        obj
        for name in gym.spaces.__all__
        if inspect.isclass(obj := getattr(gym.spaces, name)) and issubclass(obj, gym.Space) and obj is not gym.Space
    }
    assert defined <= {type(s) for s in SPACES.values()}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_a_space_and_its_values_come_back_exactly(name: str) -> None:
    space = SPACES[name]
    conv = space_converter(space, name)  # refuses a space that would not come back
    assert conv.space == space
    ts = type_spec(declaration(space))
    codec = codec_for(declaration(space))
    space.seed(3)
    for _ in range(5):
        x = space.sample()
        payload = codec.encode(conv.from_gym(x))  # what an environment sends
        wire = payload_pb2.Payload.FromString(payload.SerializeToString())
        back = conv.to_gym(codec.decode(wire))  # what the client holds (the codec validates it)
        assert back in space, (x, back)
        assert data_equivalence(x, back), (x, back)
    if ts.kind == payload_pb2.PAYLOAD_KIND_JSON:
        assert ts.json_schema  # a JSON value always carries its schema


def test_per_dimension_bounds_are_advertised_and_enforced() -> None:
    space = SPACES["box-per-dimension"]
    ts = type_spec(declaration(space)).tensor
    assert ts.element_minimum[0] == pytest.approx(-4.8) and ts.element_maximum[1] == np.inf
    assert not ts.HasField("minimum")  # some elements are unbounded: no envelope
    codec = codec_for(declaration(space))
    codec.decode(codec.encode(np.array([4.0, 1e9, 0.0, -1e9], dtype=np.float32)))
    with pytest.raises(openenv.InvalidArgument, match="above its maximum"):
        codec.decode(codec.encode(np.array([5.0, 0.0, 0.0, 0.0], dtype=np.float32)))
    cat = type_spec(declaration(SPACES["multidiscrete-2d-start-int32"])).tensor
    assert cat.categorical and list(cat.element_minimum) == [0, 1, -2, 3] and cat.minimum == -2


def test_a_categorical_tensor_must_be_bounded_integers() -> None:
    with pytest.raises(ValueError, match="integer dtype"):
        openenv.TensorSpec(np.float32, (2,), 0, 1, categorical=True)
    with pytest.raises(ValueError, match="bounded"):
        openenv.TensorSpec(np.int64, (2,), 0, None, categorical=True)
    with pytest.raises(ValueError, match="one bound per element"):
        openenv.TensorSpec(np.int64, (3,), [0, 1], None)


def test_an_unknown_space_is_a_clear_error() -> None:
    class Odd(gym.Space[int]):
        pass

    with pytest.raises(SpaceError, match="no contract type represents"):
        declaration(Odd())


# ---------------------------------------------------------------- values without a fixed shape


def _tool_converters() -> tuple[Any, Any]:
    from google.protobuf import descriptor_pb2

    from openenv.spaces import converter
    from openenv.v1 import tool_pb2

    files = descriptor_pb2.FileDescriptorSet()
    for f in (
        tool_pb2.DESCRIPTOR.dependencies[0],
        tool_pb2.DESCRIPTOR.dependencies[1],
        tool_pb2.DESCRIPTOR,
    ):
        f.CopyToProto(files.file.add())

    def spec(name: str) -> payload_pb2.TypeSpec:
        return payload_pb2.TypeSpec(kind=payload_pb2.PAYLOAD_KIND_MESSAGE, message_type=name)

    return (
        converter(spec("openenv.v1.CallToolRequest"), files, "action"),
        converter(spec("openenv.v1.CallToolResponse"), files, "observation"),
    )


def test_a_tool_call_is_a_dict_of_text_with_json_arguments() -> None:
    """CallToolRequest (every tool environment's step action): ``arguments`` (a Struct) is the
    Text of a JSON document, ``timeout`` (a Duration) seconds; the JSON text or the dict itself
    encode the same call, an omitted field stays unset (0 s: no timeout, not an instant one)."""
    from openenv.v1 import tool_pb2

    act, _ = _tool_converters()
    assert isinstance(act.space, Dict) and isinstance(act.space["arguments"], Text)
    assert act.space["timeout"] == Box(-np.inf, np.inf, (), np.float64)
    as_text = act.from_gym({"name": "move", "arguments": '{"to": [1, 2], "why": "caf\\u00e9"}', "timeout": 0.0})
    as_dict = act.from_gym({"name": "move", "arguments": {"to": [1, 2], "why": "café"}})
    assert as_text == as_dict and not as_dict.HasField("timeout")
    req = tool_pb2.CallToolRequest(name="move")
    req.arguments.update({"to": [1, 2], "why": "café"})
    req.timeout.FromSeconds(2)
    back = act.to_gym(req)
    assert json.loads(back["arguments"]) == {"to": [1.0, 2.0], "why": "café"} and back["timeout"] == 2.0
    assert back["arguments"].isascii() and " " not in back["arguments"]  # compact, \u-escaped
    assert back in act.space  # ASCII: inside the Text's character set
    with pytest.raises(ValueError, match="not a JSON document"):
        act.from_gym({"name": "move", "arguments": "{to: 1"})
    with pytest.raises(ValueError, match="no field"):
        act.from_gym({"name": "move", "args": {}})


def test_a_tool_result_carries_text_base64_bytes_and_json() -> None:
    """CallToolResponse: text content as Text, an image's bytes as base64 Text (protobuf's JSON
    mapping), structured content as JSON Text; back to the same message."""
    from openenv.v1 import tool_pb2

    _, obs = _tool_converters()
    resp = tool_pb2.CallToolResponse(name="look")
    resp.result.content.add().text.text = "a room"
    img = resp.result.content.add().image
    img.data, img.mime_type = b"\x89PNG\r\n", "image/png"
    resp.result.structured_content.update({"rooms": 3})
    value = obs.to_gym(resp)
    assert value in obs.space
    assert value["result"]["content"][1]["image"]["data"] == "iVBORw0K"
    assert value["result"]["structured_content"] == '{"rooms":3.0}'
    assert obs.from_gym(value) == resp


def test_untyped_json_parts_are_json_text() -> None:
    """Any JSON value (no schema, an object without properties, an array without items) is a
    JSON Text; a declared type keeps its own space."""
    from openenv.spaces import _schema

    for schema in ({}, {"type": "object"}, {"type": "array"}, {"description": "anything"}):
        conv = _schema(schema, schema, "x")
        assert isinstance(conv.space, Text)
        assert conv.to_gym({"a": [1, None]}) == '{"a":[1,null]}' and conv.from_gym('{"a":[1,null]}') == {"a": [1, None]}
    obj = {"type": "object", "properties": {"k": {"type": "integer", "minimum": 0, "maximum": 3}, "extra": {}}}
    conv = _schema(obj, obj, "x")
    assert conv.space["k"] == Discrete(4) and isinstance(conv.space["extra"], Text)
