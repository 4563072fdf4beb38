from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    D_TYPE_UNSPECIFIED: _ClassVar[DType]
    D_TYPE_BOOL: _ClassVar[DType]
    D_TYPE_INT8: _ClassVar[DType]
    D_TYPE_UINT8: _ClassVar[DType]
    D_TYPE_INT16: _ClassVar[DType]
    D_TYPE_UINT16: _ClassVar[DType]
    D_TYPE_INT32: _ClassVar[DType]
    D_TYPE_UINT32: _ClassVar[DType]
    D_TYPE_INT64: _ClassVar[DType]
    D_TYPE_UINT64: _ClassVar[DType]
    D_TYPE_FLOAT16: _ClassVar[DType]
    D_TYPE_FLOAT32: _ClassVar[DType]
    D_TYPE_FLOAT64: _ClassVar[DType]

class PayloadKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAYLOAD_KIND_UNSPECIFIED: _ClassVar[PayloadKind]
    PAYLOAD_KIND_MESSAGE: _ClassVar[PayloadKind]
    PAYLOAD_KIND_JSON: _ClassVar[PayloadKind]
    PAYLOAD_KIND_TENSOR: _ClassVar[PayloadKind]
D_TYPE_UNSPECIFIED: DType
D_TYPE_BOOL: DType
D_TYPE_INT8: DType
D_TYPE_UINT8: DType
D_TYPE_INT16: DType
D_TYPE_UINT16: DType
D_TYPE_INT32: DType
D_TYPE_UINT32: DType
D_TYPE_INT64: DType
D_TYPE_UINT64: DType
D_TYPE_FLOAT16: DType
D_TYPE_FLOAT32: DType
D_TYPE_FLOAT64: DType
PAYLOAD_KIND_UNSPECIFIED: PayloadKind
PAYLOAD_KIND_MESSAGE: PayloadKind
PAYLOAD_KIND_JSON: PayloadKind
PAYLOAD_KIND_TENSOR: PayloadKind

class Payload(_message.Message):
    __slots__ = ("message", "json", "tensor")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    message: _any_pb2.Any
    json: _struct_pb2.Value
    tensor: Tensor
    def __init__(self, message: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., json: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("dtype", "shape", "minimum", "maximum", "element_minimum", "element_maximum", "categorical")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    MINIMUM_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_MINIMUM_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_MAXIMUM_FIELD_NUMBER: _ClassVar[int]
    CATEGORICAL_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    minimum: float
    maximum: float
    element_minimum: _containers.RepeatedScalarFieldContainer[float]
    element_maximum: _containers.RepeatedScalarFieldContainer[float]
    categorical: bool
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., minimum: _Optional[float] = ..., maximum: _Optional[float] = ..., element_minimum: _Optional[_Iterable[float]] = ..., element_maximum: _Optional[_Iterable[float]] = ..., categorical: _Optional[bool] = ...) -> None: ...

class TypeSpec(_message.Message):
    __slots__ = ("kind", "message_type", "json_schema", "tensor", "examples")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    kind: PayloadKind
    message_type: str
    json_schema: _struct_pb2.Struct
    tensor: TensorSpec
    examples: _containers.RepeatedCompositeFieldContainer[Payload]
    def __init__(self, kind: _Optional[_Union[PayloadKind, str]] = ..., message_type: _Optional[str] = ..., json_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tensor: _Optional[_Union[TensorSpec, _Mapping]] = ..., examples: _Optional[_Iterable[_Union[Payload, _Mapping]]] = ...) -> None: ...
