import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetLoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLoadResponse(_message.Message):
    __slots__ = ("load", "workers")
    LOAD_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    load: ServerLoad
    workers: _containers.RepeatedCompositeFieldContainer[WorkerLoad]
    def __init__(self, load: _Optional[_Union[ServerLoad, _Mapping]] = ..., workers: _Optional[_Iterable[_Union[WorkerLoad, _Mapping]]] = ...) -> None: ...

class WorkerLoad(_message.Message):
    __slots__ = ("index", "pid", "up", "restarts", "load")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    index: int
    pid: int
    up: bool
    restarts: int
    load: ServerLoad
    def __init__(self, index: _Optional[int] = ..., pid: _Optional[int] = ..., up: _Optional[bool] = ..., restarts: _Optional[int] = ..., load: _Optional[_Union[ServerLoad, _Mapping]] = ...) -> None: ...

class ServerLoad(_message.Message):
    __slots__ = ("sessions_open", "max_sessions", "queued_handshakes", "step_latency_p50", "step_latency_p99", "steps_total", "sessions_opened_total", "draining", "uptime")
    SESSIONS_OPEN_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_HANDSHAKES_FIELD_NUMBER: _ClassVar[int]
    STEP_LATENCY_P50_FIELD_NUMBER: _ClassVar[int]
    STEP_LATENCY_P99_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_OPENED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    sessions_open: int
    max_sessions: int
    queued_handshakes: int
    step_latency_p50: _duration_pb2.Duration
    step_latency_p99: _duration_pb2.Duration
    steps_total: int
    sessions_opened_total: int
    draining: bool
    uptime: _duration_pb2.Duration
    def __init__(self, sessions_open: _Optional[int] = ..., max_sessions: _Optional[int] = ..., queued_handshakes: _Optional[int] = ..., step_latency_p50: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., step_latency_p99: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., steps_total: _Optional[int] = ..., sessions_opened_total: _Optional[int] = ..., draining: _Optional[bool] = ..., uptime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
