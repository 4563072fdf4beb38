from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TokenSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_SOURCE_UNSPECIFIED: _ClassVar[TokenSource]
    TOKEN_SOURCE_UPSTREAM: _ClassVar[TokenSource]
    TOKEN_SOURCE_NONE: _ClassVar[TokenSource]
TOKEN_SOURCE_UNSPECIFIED: TokenSource
TOKEN_SOURCE_UPSTREAM: TokenSource
TOKEN_SOURCE_NONE: TokenSource

class TrainingTrace(_message.Message):
    __slots__ = ("schema_version", "run_id", "episode_id", "session_id", "task_id", "agent", "model", "token_source", "turns", "steps", "reward", "solved", "status", "error", "started_at", "duration_s")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_SOURCE_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    SOLVED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    run_id: str
    episode_id: str
    session_id: str
    task_id: str
    agent: str
    model: str
    token_source: TokenSource
    turns: _containers.RepeatedCompositeFieldContainer[TrainingTurn]
    steps: _containers.RepeatedCompositeFieldContainer[TraceStep]
    reward: float
    solved: bool
    status: str
    error: str
    started_at: float
    duration_s: float
    def __init__(self, schema_version: _Optional[int] = ..., run_id: _Optional[str] = ..., episode_id: _Optional[str] = ..., session_id: _Optional[str] = ..., task_id: _Optional[str] = ..., agent: _Optional[str] = ..., model: _Optional[str] = ..., token_source: _Optional[_Union[TokenSource, str]] = ..., turns: _Optional[_Iterable[_Union[TrainingTurn, _Mapping]]] = ..., steps: _Optional[_Iterable[_Union[TraceStep, _Mapping]]] = ..., reward: _Optional[float] = ..., solved: _Optional[bool] = ..., status: _Optional[str] = ..., error: _Optional[str] = ..., started_at: _Optional[float] = ..., duration_s: _Optional[float] = ...) -> None: ...

class TrainingTurn(_message.Message):
    __slots__ = ("call_index", "api", "request", "injected", "response", "sampling", "prompt_token_ids", "completion_token_ids", "per_token_logps", "loss_mask", "tool_calls", "status", "started_at", "ttft_s", "duration_s")
    CALL_INDEX_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    INJECTED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PER_TOKEN_LOGPS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    TTFT_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    call_index: int
    api: str
    request: _struct_pb2.Struct
    injected: _struct_pb2.Struct
    response: _struct_pb2.Struct
    sampling: _struct_pb2.Struct
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    completion_token_ids: _containers.RepeatedScalarFieldContainer[int]
    per_token_logps: _containers.RepeatedScalarFieldContainer[float]
    loss_mask: _containers.RepeatedScalarFieldContainer[int]
    tool_calls: _containers.RepeatedCompositeFieldContainer[TraceToolCall]
    status: int
    started_at: float
    ttft_s: float
    duration_s: float
    def __init__(self, call_index: _Optional[int] = ..., api: _Optional[str] = ..., request: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., injected: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., response: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., sampling: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., completion_token_ids: _Optional[_Iterable[int]] = ..., per_token_logps: _Optional[_Iterable[float]] = ..., loss_mask: _Optional[_Iterable[int]] = ..., tool_calls: _Optional[_Iterable[_Union[TraceToolCall, _Mapping]]] = ..., status: _Optional[int] = ..., started_at: _Optional[float] = ..., ttft_s: _Optional[float] = ..., duration_s: _Optional[float] = ...) -> None: ...

class TraceToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class TraceStep(_message.Message):
    __slots__ = ("index", "tool", "arguments", "result", "reward", "terminated", "truncated")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    index: int
    tool: str
    arguments: _struct_pb2.Value
    result: str
    reward: float
    terminated: bool
    truncated: bool
    def __init__(self, index: _Optional[int] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., result: _Optional[str] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ...) -> None: ...
