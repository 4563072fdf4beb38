from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RubricSpec(_message.Message):
    __slots__ = ("name", "kind", "description", "weight", "children", "params", "minimum", "maximum")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    MINIMUM_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    description: str
    weight: float
    children: _containers.RepeatedCompositeFieldContainer[RubricSpec]
    params: _struct_pb2.Struct
    minimum: float
    maximum: float
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., description: _Optional[str] = ..., weight: _Optional[float] = ..., children: _Optional[_Iterable[_Union[RubricSpec, _Mapping]]] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., minimum: _Optional[float] = ..., maximum: _Optional[float] = ...) -> None: ...

class RubricScore(_message.Message):
    __slots__ = ("name", "score", "weight", "children", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    score: float
    weight: float
    children: _containers.RepeatedCompositeFieldContainer[RubricScore]
    reason: str
    def __init__(self, name: _Optional[str] = ..., score: _Optional[float] = ..., weight: _Optional[float] = ..., children: _Optional[_Iterable[_Union[RubricScore, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...
