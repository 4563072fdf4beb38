"""``openenv.v1.Payload`` <-> canonical JSON, driven by an ``EnvironmentInfo``.

JSON transports carry every payload as its canonical JSON form:

* ``PAYLOAD_KIND_MESSAGE``: the message's canonical proto3 JSON mapping with the
  ``.proto`` field names (``json_format.MessageToDict(preserving_proto_field_name=True)``;
  ``ParseDict`` accepts both field-name spellings back);
* ``PAYLOAD_KIND_JSON``: the JSON value itself;
* ``PAYLOAD_KIND_TENSOR``: a nested list (decoded with the declared dtype).

The message classes come from the advertised descriptors (no precompiled stubs needed),
so this works for remote environments in any language. Built once per ``TypeSpec``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf.message import Message

from openenv.errors import InvalidArgument
from openenv.runtime.anys import canonicalize_anys
from openenv.runtime.codec import _dtypes, message_class, tensor_from_proto, tensor_to_proto
from openenv.v1 import environment_pb2, payload_pb2, tool_pb2
from openenv.values import from_value, to_value

__all__ = ["PayloadJson", "info_pool", "info_to_json", "message_to_json", "parse_info"]

CALL_TOOL = tool_pb2.CallToolRequest.DESCRIPTOR.full_name
CALL_TOOL_RESPONSE = tool_pb2.CallToolResponse.DESCRIPTOR.full_name
LIST_TOOLS = tool_pb2.ListToolsRequest.DESCRIPTOR.full_name
LIST_TOOLS_RESPONSE = tool_pb2.ListToolsResponse.DESCRIPTOR.full_name


def message_to_json(msg: Message) -> Any:
    """Canonical JSON of a message, with ``.proto`` field names."""
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def info_pool(info: environment_pb2.EnvironmentInfo) -> descriptor_pool.DescriptorPool:
    """A descriptor pool with the environment's advertised types (for the ``Any`` values in
    ``TypeSpec.examples``), the well-known types and openenv.v1, without touching the
    process's default pool."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(fdp: descriptor_pb2.FileDescriptorProto) -> None:
        if fdp.name not in added:
            pool.Add(fdp)
            added.add(fdp.name)

    def add_file(fd: Any) -> None:
        for dep in fd.dependencies:
            add_file(dep)
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        add(fdp)

    for fd in (environment_pb2.DESCRIPTOR, tool_pb2.DESCRIPTOR):
        add_file(fd)
    # The advertised files, each after its dependencies; a well-known file an environment left
    # out (google/protobuf/timestamp.proto, say: servers may) comes from protobuf itself.
    advertised = {fdp.name: fdp for fdp in info.descriptors.file}

    def add_advertised(name: str) -> None:
        if name in added:
            return
        fdp = advertised.get(name)
        if fdp is None:
            if name.startswith("google/protobuf/"):
                try:
                    add_file(descriptor_pool.Default().FindFileByName(name))
                except KeyError:
                    pass  # unknown: pool.Add of its dependant says which file is missing
            return
        added.add(name)  # before its dependencies: a cycle ends here, and pool.Add reports it
        for dep in fdp.dependency:
            add_advertised(dep)
        pool.Add(fdp)

    for name in advertised:
        add_advertised(name)
    return pool


def info_to_json(info: environment_pb2.EnvironmentInfo) -> dict[str, Any]:
    """``EnvironmentInfo`` as proto3 JSON (examples of remote types included)."""
    try:
        pool = info_pool(info)
    except (TypeError, ValueError):  # conflicting or incomplete descriptors: examples left out
        bare = environment_pb2.EnvironmentInfo()
        bare.CopyFrom(info)
        for part in (bare.action, bare.observation, bare.state):
            del part.examples[:]
        return json_format.MessageToDict(bare, preserving_proto_field_name=True)
    return json_format.MessageToDict(info, preserving_proto_field_name=True, descriptor_pool=pool)


def parse_info(doc: Any) -> environment_pb2.EnvironmentInfo:
    """An ``EnvironmentInfo`` from its proto3 JSON (``GET /openenv/info``): the advertised
    descriptors are read first, so ``Any`` examples of the environment's own types parse."""
    if not isinstance(doc, dict):
        raise ValueError(f"an EnvironmentInfo document must be a JSON object, got {type(doc).__name__}")
    bare = environment_pb2.EnvironmentInfo()
    if isinstance(doc.get("descriptors"), dict):
        json_format.ParseDict(doc["descriptors"], bare.descriptors, ignore_unknown_fields=True)
    info = environment_pb2.EnvironmentInfo()
    pool = info_pool(bare)
    json_format.ParseDict(dict(doc), info, ignore_unknown_fields=True, descriptor_pool=pool)
    # json_format packs an Any's message with the map order of this process: the bytes a
    # server packed canonically (runtime/anys.py) come out only when canonicalized the same way.
    canonicalize_anys(info, [pool])
    return info


class PayloadJson:
    """Converts the payloads of one declared type (``TypeSpec``) to and from JSON."""

    def __init__(self, spec: payload_pb2.TypeSpec, info: environment_pb2.EnvironmentInfo) -> None:
        self.kind = spec.kind
        self.message_type = spec.message_type
        self._info = info
        self._cls: type[Message] | None = None
        self.dtype = _dtypes().get(spec.tensor.dtype) if spec.HasField("tensor") else None
        self._classes: dict[str, type[Message]] = {}

    def cls(self, name: str | None = None) -> type[Message]:
        """The message class of ``name`` (default: the declared message type)."""
        name = name or self.message_type
        c = self._classes.get(name)
        if c is None:
            c = self._classes[name] = message_class(self._info.descriptors, name)
        return c

    def to_json(self, p: payload_pb2.Payload) -> Any:
        """Canonical JSON of a payload (None for an unset payload)."""
        kind = p.WhichOneof("kind")
        if kind == "json":
            return from_value(p.json)
        if kind == "message":
            name = p.message.type_url.rsplit("/", 1)[-1]
            msg = self.cls(name)()
            p.message.Unpack(msg)
            return message_to_json(msg)
        if kind == "tensor":
            return tensor_from_proto(p.tensor).tolist()
        return None

    def from_json(self, value: Any, out: payload_pb2.Payload) -> payload_pb2.Payload:
        """Encode canonical JSON as a payload of the declared kind.

        Raises :class:`InvalidArgument` when the value does not fit (e.g. an unknown field
        of a message type).
        """
        if self.kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
            if not isinstance(value, dict):
                raise InvalidArgument(f"expected a JSON object for {self.message_type}, got {type(value).__name__}")
            try:
                msg = json_format.ParseDict(value, self.cls()())
            except json_format.ParseError as e:
                raise InvalidArgument(f"invalid {self.message_type}: {e}") from None
            out.message.Pack(msg)
        elif self.kind == payload_pb2.PAYLOAD_KIND_TENSOR:
            import numpy as np

            try:
                arr = np.asarray(value, dtype=self.dtype)
            except (TypeError, ValueError) as e:
                raise InvalidArgument(f"not a tensor of {self.dtype}: {e}") from None
            tensor_to_proto(arr, out.tensor)
        else:
            try:
                to_value(value, out.json)
            except TypeError as e:
                raise InvalidArgument(str(e)) from None
        return out

    def fields(self) -> frozenset[str]:
        """Top-level field names of the declared message type (empty for other kinds)."""
        if self.kind != payload_pb2.PAYLOAD_KIND_MESSAGE:
            return frozenset()
        d = self.cls().DESCRIPTOR
        return frozenset(f.name for f in d.fields) | frozenset(f.json_name for f in d.fields)
