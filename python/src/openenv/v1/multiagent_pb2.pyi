import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from openenv.v1 import payload_pb2 as _payload_pb2
from openenv.v1 import rubric_pb2 as _rubric_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VacancyPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VACANCY_POLICY_UNSPECIFIED: _ClassVar[VacancyPolicy]
    VACANCY_POLICY_TRUNCATE: _ClassVar[VacancyPolicy]
    VACANCY_POLICY_FORFEIT: _ClassVar[VacancyPolicy]

class SeatEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEAT_EVENT_KIND_UNSPECIFIED: _ClassVar[SeatEventKind]
    SEAT_EVENT_KIND_LEFT: _ClassVar[SeatEventKind]
    SEAT_EVENT_KIND_JOINED: _ClassVar[SeatEventKind]
    SEAT_EVENT_KIND_EXPIRED: _ClassVar[SeatEventKind]

class TurnMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_MODE_UNSPECIFIED: _ClassVar[TurnMode]
    TURN_MODE_TURN_BASED: _ClassVar[TurnMode]
    TURN_MODE_SIMULTANEOUS: _ClassVar[TurnMode]

class IllegalActionPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ILLEGAL_ACTION_POLICY_UNSPECIFIED: _ClassVar[IllegalActionPolicy]
    ILLEGAL_ACTION_POLICY_REJECT: _ClassVar[IllegalActionPolicy]
    ILLEGAL_ACTION_POLICY_PENALIZE: _ClassVar[IllegalActionPolicy]
VACANCY_POLICY_UNSPECIFIED: VacancyPolicy
VACANCY_POLICY_TRUNCATE: VacancyPolicy
VACANCY_POLICY_FORFEIT: VacancyPolicy
SEAT_EVENT_KIND_UNSPECIFIED: SeatEventKind
SEAT_EVENT_KIND_LEFT: SeatEventKind
SEAT_EVENT_KIND_JOINED: SeatEventKind
SEAT_EVENT_KIND_EXPIRED: SeatEventKind
TURN_MODE_UNSPECIFIED: TurnMode
TURN_MODE_TURN_BASED: TurnMode
TURN_MODE_SIMULTANEOUS: TurnMode
ILLEGAL_ACTION_POLICY_UNSPECIFIED: IllegalActionPolicy
ILLEGAL_ACTION_POLICY_REJECT: IllegalActionPolicy
ILLEGAL_ACTION_POLICY_PENALIZE: IllegalActionPolicy

class MultiAgentSpec(_message.Message):
    __slots__ = ("agents", "mode", "reward_sum", "illegal_actions", "joinable", "hidden_information", "rejoin_timeout", "vacancy")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REWARD_SUM_FIELD_NUMBER: _ClassVar[int]
    ILLEGAL_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    JOINABLE_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_INFORMATION_FIELD_NUMBER: _ClassVar[int]
    REJOIN_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    VACANCY_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentSpec]
    mode: TurnMode
    reward_sum: float
    illegal_actions: IllegalActionPolicy
    joinable: bool
    hidden_information: bool
    rejoin_timeout: _duration_pb2.Duration
    vacancy: VacancyPolicy
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentSpec, _Mapping]]] = ..., mode: _Optional[_Union[TurnMode, str]] = ..., reward_sum: _Optional[float] = ..., illegal_actions: _Optional[_Union[IllegalActionPolicy, str]] = ..., joinable: _Optional[bool] = ..., hidden_information: _Optional[bool] = ..., rejoin_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., vacancy: _Optional[_Union[VacancyPolicy, str]] = ...) -> None: ...

class SeatEvent(_message.Message):
    __slots__ = ("kind", "agent_ids", "rejoin_within")
    KIND_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    REJOIN_WITHIN_FIELD_NUMBER: _ClassVar[int]
    kind: SeatEventKind
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    rejoin_within: _duration_pb2.Duration
    def __init__(self, kind: _Optional[_Union[SeatEventKind, str]] = ..., agent_ids: _Optional[_Iterable[str]] = ..., rejoin_within: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("id", "role", "description", "action", "observation")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: str
    description: str
    action: _payload_pb2.TypeSpec
    observation: _payload_pb2.TypeSpec
    def __init__(self, id: _Optional[str] = ..., role: _Optional[str] = ..., description: _Optional[str] = ..., action: _Optional[_Union[_payload_pb2.TypeSpec, _Mapping]] = ..., observation: _Optional[_Union[_payload_pb2.TypeSpec, _Mapping]] = ...) -> None: ...

class WorldRequest(_message.Message):
    __slots__ = ("join_token", "agent_ids")
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    join_token: str
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, join_token: _Optional[str] = ..., agent_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class WorldInfo(_message.Message):
    __slots__ = ("world_id", "join_token", "agent_ids", "owner")
    WORLD_ID_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    world_id: str
    join_token: str
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    owner: bool
    def __init__(self, world_id: _Optional[str] = ..., join_token: _Optional[str] = ..., agent_ids: _Optional[_Iterable[str]] = ..., owner: _Optional[bool] = ...) -> None: ...

class AgentTimeStep(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "metadata", "reward_breakdown")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REWARD_BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    observation: _payload_pb2.Payload
    reward: float
    terminated: bool
    truncated: bool
    metadata: _struct_pb2.Struct
    reward_breakdown: _rubric_pb2.RubricScore
    def __init__(self, observation: _Optional[_Union[_payload_pb2.Payload, _Mapping]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., reward_breakdown: _Optional[_Union[_rubric_pb2.RubricScore, _Mapping]] = ...) -> None: ...
