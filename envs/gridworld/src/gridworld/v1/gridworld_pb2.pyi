from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Move(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MOVE_UNSPECIFIED: _ClassVar[Move]
    MOVE_UP: _ClassVar[Move]
    MOVE_DOWN: _ClassVar[Move]
    MOVE_LEFT: _ClassVar[Move]
    MOVE_RIGHT: _ClassVar[Move]
MOVE_UNSPECIFIED: Move
MOVE_UP: Move
MOVE_DOWN: Move
MOVE_LEFT: Move
MOVE_RIGHT: Move

class Action(_message.Message):
    __slots__ = ("move",)
    MOVE_FIELD_NUMBER: _ClassVar[int]
    move: Move
    def __init__(self, move: _Optional[_Union[Move, str]] = ...) -> None: ...

class Position(_message.Message):
    __slots__ = ("row", "col")
    ROW_FIELD_NUMBER: _ClassVar[int]
    COL_FIELD_NUMBER: _ClassVar[int]
    row: int
    col: int
    def __init__(self, row: _Optional[int] = ..., col: _Optional[int] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("agent", "goal", "grid", "bumped")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    BUMPED_FIELD_NUMBER: _ClassVar[int]
    agent: Position
    goal: Position
    grid: _containers.RepeatedScalarFieldContainer[str]
    bumped: bool
    def __init__(self, agent: _Optional[_Union[Position, _Mapping]] = ..., goal: _Optional[_Union[Position, _Mapping]] = ..., grid: _Optional[_Iterable[str]] = ..., bumped: _Optional[bool] = ...) -> None: ...

class State(_message.Message):
    __slots__ = ("seed", "height", "width", "agent", "goal", "total_reward")
    SEED_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_REWARD_FIELD_NUMBER: _ClassVar[int]
    seed: int
    height: int
    width: int
    agent: Position
    goal: Position
    total_reward: float
    def __init__(self, seed: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., agent: _Optional[_Union[Position, _Mapping]] = ..., goal: _Optional[_Union[Position, _Mapping]] = ..., total_reward: _Optional[float] = ...) -> None: ...
