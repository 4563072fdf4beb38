"""What an environment declares, read from its ``EnvironmentInfo`` and nothing else.

:class:`EnvSpec` builds a private descriptor pool from the advertised FileDescriptorSet
(well-known types may be omitted by the server and are filled in from protobuf), so typed
payloads are decoded without any precompiled stub of the environment. :class:`TypeInfo`
says whether a payload conforms to a declared ``TypeSpec`` and decodes it into plain Python
for canonical comparison.
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import numpy as np
from google.protobuf import (  # noqa: F401 - imported so the default pool knows the well-known types
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError, Message

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import payload_pb2, tool_pb2
from openenv.values import from_struct, from_value
from openenv_conformance.tables import FEEDBACK_LEVELS, GRADING_ANNOTATION

__all__ = [
    "DEFAULT_ACTION_BUDGET",
    "DTYPES",
    "DescriptorError",
    "EnvSpec",
    "TypeInfo",
    "build_pool",
    "grading_declaration",
    "message_json",
]

#: Steps per episode the suite spends when the environment does not declare an action budget.
DEFAULT_ACTION_BUDGET = 12

_KIND_NAMES = {
    payload_pb2.PAYLOAD_KIND_UNSPECIFIED: "unspecified",
    payload_pb2.PAYLOAD_KIND_MESSAGE: "message",
    payload_pb2.PAYLOAD_KIND_JSON: "json",
    payload_pb2.PAYLOAD_KIND_TENSOR: "tensor",
}
DTYPES: dict[payload_pb2.DType, np.dtype] = {
    payload_pb2.D_TYPE_BOOL: np.dtype("bool"),
    payload_pb2.D_TYPE_INT8: np.dtype("<i1"),
    payload_pb2.D_TYPE_UINT8: np.dtype("<u1"),
    payload_pb2.D_TYPE_INT16: np.dtype("<i2"),
    payload_pb2.D_TYPE_UINT16: np.dtype("<u2"),
    payload_pb2.D_TYPE_INT32: np.dtype("<i4"),
    payload_pb2.D_TYPE_UINT32: np.dtype("<u4"),
    payload_pb2.D_TYPE_INT64: np.dtype("<i8"),
    payload_pb2.D_TYPE_UINT64: np.dtype("<u8"),
    payload_pb2.D_TYPE_FLOAT16: np.dtype("<f2"),
    payload_pb2.D_TYPE_FLOAT32: np.dtype("<f4"),
    payload_pb2.D_TYPE_FLOAT64: np.dtype("<f8"),
}


def message_json(msg: Message, *, proto_names: bool = False) -> dict[str, Any]:
    """The proto3 JSON of ``msg``, ``Any`` values resolved in the message's own pool."""
    pool = msg.DESCRIPTOR.file.pool
    # types-protobuf types MessageToDict's pool as the pure-Python class; at run time every pool
    # (descriptor_pool.DescriptorPool() included) is upb's, which MessageToDict takes.
    return json_format.MessageToDict(msg, preserving_proto_field_name=proto_names, descriptor_pool=pool)  # type: ignore[arg-type]


def grading_declaration(tool: tool_pb2.Tool) -> Any:
    """What ``tool`` declares about grading (docs/protocol.md §7.1): the raw value of its
    ``"openenv/grading"`` annotation (normally an object: ``argument``, ``language``), else, for
    RFC 0010's ``{"openenv/sandbox": {..., "grades": true}}``, that object; None when the tool
    declares no grading."""
    if not tool.HasField("annotations"):
        return None
    annotations = from_struct(tool.annotations)
    if GRADING_ANNOTATION in annotations:
        return annotations[GRADING_ANNOTATION]
    sandbox = annotations.get("openenv/sandbox")
    if isinstance(sandbox, dict) and sandbox.get("grades") is True:
        return sandbox
    return None


_FEEDBACK_NAMES = {getattr(pb, enum): level for level, enum in FEEDBACK_LEVELS.items()}


class DescriptorError(Exception):
    """The advertised descriptors cannot describe the declared types."""


def build_pool(fds: descriptor_pb2.FileDescriptorSet) -> descriptor_pool.DescriptorPool:
    """A fresh pool holding every file of ``fds`` (dependencies first); missing
    ``google/protobuf/*.proto`` files are taken from protobuf itself."""
    pool = descriptor_pool.DescriptorPool()
    files = {f.name: f for f in fds.file}
    added: set[str] = set()

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in added:
            return
        if name in chain:
            raise DescriptorError(f"import cycle: {' -> '.join((*chain, name))}")
        f = files.get(name)
        if f is None:
            if not name.startswith("google/protobuf/"):
                raise DescriptorError(
                    f"{chain[-1] if chain else 'a file'} imports {name!r}, which the "
                    "advertised FileDescriptorSet does not contain"
                )
            try:
                f = descriptor_pb2.FileDescriptorProto()
                descriptor_pool.Default().FindFileByName(name).CopyToProto(f)
            except KeyError:
                raise DescriptorError(f"unknown well-known file {name!r}") from None
        for dep in f.dependency:
            add(dep, (*chain, name))
        try:
            pool.Add(f)
        except Exception as e:  # noqa: BLE001 - protobuf raises TypeError/ValueError variously
            raise DescriptorError(f"{name}: {e}") from None
        added.add(name)

    for name in files:
        add(name, ())
    return pool


class TypeInfo:
    """One declared type (action, observation or state)."""

    def __init__(self, role: str, spec: Any, env: EnvSpec) -> None:
        self.role = role
        self.spec = spec
        self.kind = spec.kind
        self.kind_name = _KIND_NAMES.get(spec.kind, f"kind {spec.kind}")
        self.message_type = spec.message_type
        self.schema: dict[str, Any] = from_struct(spec.json_schema) if spec.HasField("json_schema") else {}
        self.schema_error = ""
        self.validator: Any = None
        if self.schema:
            try:
                cls = jsonschema.validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
                cls.check_schema(self.schema)
                self.validator = cls(self.schema)
            except jsonschema.SchemaError as e:
                self.schema_error = f"{role} json_schema is not a valid JSON Schema: {e.message}"
        self.cls: type[Message] | None = None
        self.class_error = ""
        if self.kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
            if env.pool is None:
                self.class_error = f"{role}: {env.pool_error}"
            elif not self.message_type:
                self.class_error = f"{role}: PAYLOAD_KIND_MESSAGE without a message_type"
            else:
                try:
                    self.cls = message_factory.GetMessageClass(env.pool.FindMessageTypeByName(self.message_type))
                except KeyError:
                    self.class_error = (
                        f"{role}: message type {self.message_type!r} is not in the advertised descriptors"
                    )
        self.examples = list(spec.examples)

    @property
    def declared(self) -> bool:
        return self.kind != payload_pb2.PAYLOAD_KIND_UNSPECIFIED

    def problems(self, payload: payload_pb2.Payload, *, allow_empty: bool = False) -> list[str]:
        """Why ``payload`` does not conform to this type (empty when it does)."""
        have = payload.WhichOneof("kind")
        if have is None:
            return [] if allow_empty or not self.declared else [f"{self.role} payload is unset"]
        if not self.declared:
            return []
        if have != self.kind_name:
            return [f"{self.role} payload is {have}, declared {self.kind_name}"]
        if self.kind == payload_pb2.PAYLOAD_KIND_MESSAGE:
            url = payload.message.type_url
            if url.rsplit("/", 1)[-1] != self.message_type:
                return [f"{self.role} Any holds {url or 'no type'}, declared {self.message_type}"]
            if self.cls is None:
                return []  # reported by schema.descriptors
            try:
                msg = self.cls.FromString(payload.message.value)
            except DecodeError as e:
                return [f"{self.role} bytes do not decode as {self.message_type}: {e}"]
            if self.validator is not None:
                try:
                    as_json = message_json(msg)
                except (json_format.Error, TypeError, KeyError):
                    return []  # e.g. an Any of a type the descriptors do not hold: nothing to validate
                return self._schema_problems(as_json)
            return []
        if self.kind == payload_pb2.PAYLOAD_KIND_JSON:
            value = from_value(payload.json)
            if self.validator is not None:
                return self._schema_problems(value)
            return []
        return self._tensor_problems(payload.tensor)

    def _schema_problems(self, value: Any) -> list[str]:
        errs = sorted(self.validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [
            f"{self.role} violates its schema at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errs[:3]
        ]

    def _tensor_problems(self, t: payload_pb2.Tensor) -> list[str]:
        ts = self.spec.tensor
        dt = DTYPES.get(t.dtype)
        if dt is None:
            return [f"{self.role} tensor has invalid dtype {t.dtype}"]
        if ts.dtype and t.dtype != ts.dtype:
            return [
                f"{self.role} tensor dtype {payload_pb2.DType.Name(t.dtype)}, declared "
                f"{payload_pb2.DType.Name(ts.dtype)}"
            ]
        shape = tuple(t.shape)
        if any(d < 0 for d in shape):
            return [f"{self.role} tensor shape {shape} has a negative extent"]
        if len(t.data) != math.prod(shape) * dt.itemsize:
            return [
                f"{self.role} tensor data is {len(t.data)} bytes; shape {shape} needs {math.prod(shape) * dt.itemsize}"
            ]
        want = tuple(ts.shape)
        if len(want) != len(shape) or any(w != -1 and w != g for w, g in zip(want, shape, strict=False)):
            return [f"{self.role} tensor shape {shape}, declared {want}"]
        arr = np.frombuffer(t.data, dtype=dt)
        if arr.size and ts.HasField("minimum") and arr.min() < ts.minimum:
            return [f"{self.role} tensor element {arr.min()} below the declared minimum {ts.minimum}"]
        if arr.size and ts.HasField("maximum") and arr.max() > ts.maximum:
            return [f"{self.role} tensor element {arr.max()} above the declared maximum {ts.maximum}"]
        for name, below in (("element_minimum", True), ("element_maximum", False)):
            per = getattr(ts, name)
            if not per:
                continue
            if len(per) != arr.size:
                return [f"{self.role} tensor has {arr.size} elements, the declared {name} {len(per)} bounds"]
            bound = np.asarray(per, dtype=np.float64)
            bad = np.flatnonzero(arr < bound if below else arr > bound)
            if bad.size:
                i = int(bad[0])
                where = "below" if below else "above"
                return [f"{self.role} tensor element {i} ({arr[i]}) {where} its declared bound {bound[i]} ({name})"]
        if ts.categorical and dt.kind not in "iu":
            return [f"{self.role} tensor is declared categorical but its dtype is {dt.name}"]
        return []

    def decode(self, payload: payload_pb2.Payload) -> Any:
        """Plain Python for ``payload`` (messages as their proto3 JSON mapping, maps as dicts,
        tensors as ``{"dtype", "shape", "data"}``)."""
        return decode_payload(payload, self.cls)


def decode_payload(payload: payload_pb2.Payload, cls: type[Message] | None = None) -> Any:
    """Plain Python for any payload (``cls`` decodes ``Any`` messages of its type)."""
    kind = payload.WhichOneof("kind")
    if kind == "json":
        return from_value(payload.json)
    if kind == "tensor":
        t = payload.tensor
        dt = DTYPES.get(t.dtype)
        if dt is None or len(t.data) != math.prod(t.shape) * dt.itemsize:
            return {"dtype": t.dtype, "shape": list(t.shape), "bytes": t.data.hex()}
        return {"dtype": dt.name, "shape": list(t.shape), "data": np.frombuffer(t.data, dtype=dt).tolist()}
    if kind == "message":
        url = payload.message.type_url
        if cls is not None and url.rsplit("/", 1)[-1] == cls.DESCRIPTOR.full_name:
            try:
                msg = cls.FromString(payload.message.value)
                return {"@type": url, **message_json(msg, proto_names=True)}
            except (DecodeError, json_format.Error, TypeError, KeyError):
                pass
        return {"@type": url, "bytes": payload.message.value.hex()}
    return None


class EnvSpec:
    """The environment as declared by its ``EnvironmentInfo``."""

    def __init__(self, info: pb.EnvironmentInfo) -> None:
        self.info = info
        self.caps = info.capabilities
        self.pool: descriptor_pool.DescriptorPool | None = None
        self.pool_error = ""
        try:
            self.pool = build_pool(info.descriptors)
        except DescriptorError as e:
            self.pool_error = str(e)
        self.action = TypeInfo("action", info.action, self)
        self.observation = TypeInfo("observation", info.observation, self)
        self.state = TypeInfo("state", info.state, self)

    @property
    def name(self) -> str:
        return f"{self.info.name} {self.info.version}".strip()

    @property
    def budget(self) -> int:
        """Steps per episode the suite may spend."""
        return int(self.caps.action_budget) or DEFAULT_ACTION_BUDGET

    @property
    def tolerance(self) -> float:
        t = self.caps.float_tolerance
        return t if math.isfinite(t) and t >= 0 else 0.0

    @property
    def max_episode_steps(self) -> int | None:
        return int(self.caps.max_episode_steps) if self.caps.HasField("max_episode_steps") else None

    @property
    def reward_range(self) -> tuple[float | None, float | None]:
        c = self.caps
        return (c.reward_min if c.HasField("reward_min") else None, c.reward_max if c.HasField("reward_max") else None)

    @property
    def grades(self) -> bool:
        """The environment grades submitted work (``Capabilities.grades``, RFC 0015)."""
        return bool(self.caps.grades)

    @property
    def feedback(self) -> str:
        """The feedback level of an episode whose reset asks for none: ``"strict"`` or ``"rich"``
        (``"strict"`` for a grading environment that leaves it unspecified, the protocol's
        default; ``""`` for one that does not grade)."""
        if not self.grades:
            return ""
        return _FEEDBACK_NAMES.get(self.caps.feedback, "strict")

    @property
    def feedback_offered(self) -> tuple[str, ...]:
        """The levels an episode may ask for at reset (option ``"feedback"``), by name; an
        unknown enum value is kept as ``"?N"`` (``grading.declared`` reports it)."""
        return tuple(_FEEDBACK_NAMES.get(f, f"?{int(f)}") for f in self.caps.feedback_offered)

    @property
    def strict(self) -> bool:
        """A session that asks for no level gets strict feedback: a grading tool's side call is
        refused (FAILED_PRECONDITION), its step answers the reward only (§7.1)."""
        return self.feedback == "strict"

    @property
    def sim(self) -> bool:
        """True when reset/step/state are served (not tools-only)."""
        return not self.caps.tools_only

    def message_class(self, full_name: str) -> type[Message] | None:
        if self.pool is None:
            return None
        try:
            return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))
        except KeyError:
            return None
