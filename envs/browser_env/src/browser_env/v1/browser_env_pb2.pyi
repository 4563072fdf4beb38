from openenv.v1 import payload_pb2 as _payload_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Observation(_message.Message):
    __slots__ = ("goal", "axtree", "screenshot", "last_action_error", "task", "focused_element_bid")
    GOAL_FIELD_NUMBER: _ClassVar[int]
    AXTREE_FIELD_NUMBER: _ClassVar[int]
    SCREENSHOT_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTION_ERROR_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    FOCUSED_ELEMENT_BID_FIELD_NUMBER: _ClassVar[int]
    goal: str
    axtree: str
    screenshot: _payload_pb2.Tensor
    last_action_error: str
    task: str
    focused_element_bid: str
    def __init__(self, goal: _Optional[str] = ..., axtree: _Optional[str] = ..., screenshot: _Optional[_Union[_payload_pb2.Tensor, _Mapping]] = ..., last_action_error: _Optional[str] = ..., task: _Optional[str] = ..., focused_element_bid: _Optional[str] = ...) -> None: ...
