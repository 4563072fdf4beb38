import datetime

from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from openenv.v1 import error_pb2 as _error_pb2
from openenv.v1 import load_pb2 as _load_pb2
from openenv.v1 import multiagent_pb2 as _multiagent_pb2
from openenv.v1 import payload_pb2 as _payload_pb2
from openenv.v1 import rubric_pb2 as _rubric_pb2
from openenv.v1 import task_pb2 as _task_pb2
from openenv.v1 import tool_pb2 as _tool_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Feedback(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FEEDBACK_UNSPECIFIED: _ClassVar[Feedback]
    FEEDBACK_STRICT: _ClassVar[Feedback]
    FEEDBACK_RICH: _ClassVar[Feedback]

class AutoresetMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUTORESET_MODE_UNSPECIFIED: _ClassVar[AutoresetMode]
    AUTORESET_MODE_DISABLED: _ClassVar[AutoresetMode]
    AUTORESET_MODE_NEXT_STEP: _ClassVar[AutoresetMode]
    AUTORESET_MODE_SAME_STEP: _ClassVar[AutoresetMode]

class EpisodeStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPISODE_STATUS_UNSPECIFIED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_NOT_STARTED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_RUNNING: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_TERMINATED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_TRUNCATED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_ABORTED: _ClassVar[EpisodeStatus]
FEEDBACK_UNSPECIFIED: Feedback
FEEDBACK_STRICT: Feedback
FEEDBACK_RICH: Feedback
AUTORESET_MODE_UNSPECIFIED: AutoresetMode
AUTORESET_MODE_DISABLED: AutoresetMode
AUTORESET_MODE_NEXT_STEP: AutoresetMode
AUTORESET_MODE_SAME_STEP: AutoresetMode
EPISODE_STATUS_UNSPECIFIED: EpisodeStatus
EPISODE_STATUS_NOT_STARTED: EpisodeStatus
EPISODE_STATUS_RUNNING: EpisodeStatus
EPISODE_STATUS_TERMINATED: EpisodeStatus
EPISODE_STATUS_TRUNCATED: EpisodeStatus
EPISODE_STATUS_ABORTED: EpisodeStatus

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("info", "info_digest")
    INFO_FIELD_NUMBER: _ClassVar[int]
    INFO_DIGEST_FIELD_NUMBER: _ClassVar[int]
    info: EnvironmentInfo
    info_digest: str
    def __init__(self, info: _Optional[_Union[EnvironmentInfo, _Mapping]] = ..., info_digest: _Optional[str] = ...) -> None: ...

class EnvironmentInfo(_message.Message):
    __slots__ = ("name", "version", "description", "protocol_version", "action", "observation", "state", "descriptors", "capabilities", "rubric", "metadata", "task_splits", "multi_agent")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TASK_SPLITS_FIELD_NUMBER: _ClassVar[int]
    MULTI_AGENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    protocol_version: str
    action: _payload_pb2.TypeSpec
    observation: _payload_pb2.TypeSpec
    state: _payload_pb2.TypeSpec
    descriptors: _descriptor_pb2.FileDescriptorSet
    capabilities: Capabilities
    rubric: _rubric_pb2.RubricSpec
    metadata: _struct_pb2.Struct
    task_splits: _containers.RepeatedCompositeFieldContainer[_task_pb2.TaskSplit]
    multi_agent: _multiagent_pb2.MultiAgentSpec
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., protocol_version: _Optional[str] = ..., action: _Optional[_Union[_payload_pb2.TypeSpec, _Mapping]] = ..., observation: _Optional[_Union[_payload_pb2.TypeSpec, _Mapping]] = ..., state: _Optional[_Union[_payload_pb2.TypeSpec, _Mapping]] = ..., descriptors: _Optional[_Union[_descriptor_pb2.FileDescriptorSet, _Mapping]] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., rubric: _Optional[_Union[_rubric_pb2.RubricSpec, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., task_splits: _Optional[_Iterable[_Union[_task_pb2.TaskSplit, _Mapping]]] = ..., multi_agent: _Optional[_Union[_multiagent_pb2.MultiAgentSpec, _Mapping]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("max_sessions", "concurrent_sessions", "deterministic", "float_tolerance", "auto_reset", "tools", "tools_only", "max_message_bytes", "max_episode_steps", "reward_min", "reward_max", "idle_timeout", "action_budget", "max_num_envs", "auth_required", "handshake_timeout", "resume_grace", "snapshots", "max_forks", "tasks", "load_reporting", "lenient_actions", "seeded", "pipelined_requests", "max_pipelined_requests", "multi_agent", "grades", "feedback", "feedback_offered", "world_wait_timeouts", "seat_events")
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    FLOAT_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    AUTO_RESET_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_ONLY_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_EPISODE_STEPS_FIELD_NUMBER: _ClassVar[int]
    REWARD_MIN_FIELD_NUMBER: _ClassVar[int]
    REWARD_MAX_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ACTION_BUDGET_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    AUTH_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    HANDSHAKE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RESUME_GRACE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    MAX_FORKS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    LOAD_REPORTING_FIELD_NUMBER: _ClassVar[int]
    LENIENT_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    SEEDED_FIELD_NUMBER: _ClassVar[int]
    PIPELINED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_PIPELINED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MULTI_AGENT_FIELD_NUMBER: _ClassVar[int]
    GRADES_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_OFFERED_FIELD_NUMBER: _ClassVar[int]
    WORLD_WAIT_TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    SEAT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    max_sessions: int
    concurrent_sessions: bool
    deterministic: bool
    float_tolerance: float
    auto_reset: bool
    tools: bool
    tools_only: bool
    max_message_bytes: int
    max_episode_steps: int
    reward_min: float
    reward_max: float
    idle_timeout: _duration_pb2.Duration
    action_budget: int
    max_num_envs: int
    auth_required: bool
    handshake_timeout: _duration_pb2.Duration
    resume_grace: _duration_pb2.Duration
    snapshots: bool
    max_forks: int
    tasks: bool
    load_reporting: bool
    lenient_actions: bool
    seeded: bool
    pipelined_requests: bool
    max_pipelined_requests: int
    multi_agent: bool
    grades: bool
    feedback: Feedback
    feedback_offered: _containers.RepeatedScalarFieldContainer[Feedback]
    world_wait_timeouts: bool
    seat_events: bool
    def __init__(self, max_sessions: _Optional[int] = ..., concurrent_sessions: _Optional[bool] = ..., deterministic: _Optional[bool] = ..., float_tolerance: _Optional[float] = ..., auto_reset: _Optional[bool] = ..., tools: _Optional[bool] = ..., tools_only: _Optional[bool] = ..., max_message_bytes: _Optional[int] = ..., max_episode_steps: _Optional[int] = ..., reward_min: _Optional[float] = ..., reward_max: _Optional[float] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., action_budget: _Optional[int] = ..., max_num_envs: _Optional[int] = ..., auth_required: _Optional[bool] = ..., handshake_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., resume_grace: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., snapshots: _Optional[bool] = ..., max_forks: _Optional[int] = ..., tasks: _Optional[bool] = ..., load_reporting: _Optional[bool] = ..., lenient_actions: _Optional[bool] = ..., seeded: _Optional[bool] = ..., pipelined_requests: _Optional[bool] = ..., max_pipelined_requests: _Optional[int] = ..., multi_agent: _Optional[bool] = ..., grades: _Optional[bool] = ..., feedback: _Optional[_Union[Feedback, str]] = ..., feedback_offered: _Optional[_Iterable[_Union[Feedback, str]]] = ..., world_wait_timeouts: _Optional[bool] = ..., seat_events: _Optional[bool] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("request_id", "handshake", "reset", "step", "state", "list_tools", "call_tool", "close", "batch_reset", "batch_step", "snapshot", "restore", "fork", "list_tasks", "pipelined", "observe", "wait_timeout")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIST_TOOLS_FIELD_NUMBER: _ClassVar[int]
    CALL_TOOL_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    BATCH_RESET_FIELD_NUMBER: _ClassVar[int]
    BATCH_STEP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    FORK_FIELD_NUMBER: _ClassVar[int]
    LIST_TASKS_FIELD_NUMBER: _ClassVar[int]
    PIPELINED_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    handshake: HandshakeRequest
    reset: ResetRequest
    step: StepRequest
    state: StateRequest
    list_tools: _tool_pb2.ListToolsRequest
    call_tool: _tool_pb2.CallToolRequest
    close: CloseRequest
    batch_reset: BatchResetRequest
    batch_step: BatchStepRequest
    snapshot: SnapshotRequest
    restore: RestoreRequest
    fork: ForkRequest
    list_tasks: _task_pb2.ListTasksRequest
    pipelined: PipelinedRequests
    observe: ObserveRequest
    wait_timeout: _duration_pb2.Duration
    def __init__(self, request_id: _Optional[int] = ..., handshake: _Optional[_Union[HandshakeRequest, _Mapping]] = ..., reset: _Optional[_Union[ResetRequest, _Mapping]] = ..., step: _Optional[_Union[StepRequest, _Mapping]] = ..., state: _Optional[_Union[StateRequest, _Mapping]] = ..., list_tools: _Optional[_Union[_tool_pb2.ListToolsRequest, _Mapping]] = ..., call_tool: _Optional[_Union[_tool_pb2.CallToolRequest, _Mapping]] = ..., close: _Optional[_Union[CloseRequest, _Mapping]] = ..., batch_reset: _Optional[_Union[BatchResetRequest, _Mapping]] = ..., batch_step: _Optional[_Union[BatchStepRequest, _Mapping]] = ..., snapshot: _Optional[_Union[SnapshotRequest, _Mapping]] = ..., restore: _Optional[_Union[RestoreRequest, _Mapping]] = ..., fork: _Optional[_Union[ForkRequest, _Mapping]] = ..., list_tasks: _Optional[_Union[_task_pb2.ListTasksRequest, _Mapping]] = ..., pipelined: _Optional[_Union[PipelinedRequests, _Mapping]] = ..., observe: _Optional[_Union[ObserveRequest, _Mapping]] = ..., wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("request_id", "handshake", "reset", "step", "state", "list_tools", "call_tool", "close", "batch_reset", "batch_step", "snapshot", "restore", "fork", "list_tasks", "pipelined", "observe", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIST_TOOLS_FIELD_NUMBER: _ClassVar[int]
    CALL_TOOL_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    BATCH_RESET_FIELD_NUMBER: _ClassVar[int]
    BATCH_STEP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    FORK_FIELD_NUMBER: _ClassVar[int]
    LIST_TASKS_FIELD_NUMBER: _ClassVar[int]
    PIPELINED_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    handshake: HandshakeResponse
    reset: ResetResponse
    step: StepResponse
    state: StateResponse
    list_tools: _tool_pb2.ListToolsResponse
    call_tool: _tool_pb2.CallToolResponse
    close: CloseResponse
    batch_reset: BatchResetResponse
    batch_step: BatchStepResponse
    snapshot: SnapshotResponse
    restore: RestoreResponse
    fork: ForkResponse
    list_tasks: _task_pb2.ListTasksResponse
    pipelined: PipelinedResponses
    observe: ObserveResponse
    error: _error_pb2.Status
    def __init__(self, request_id: _Optional[int] = ..., handshake: _Optional[_Union[HandshakeResponse, _Mapping]] = ..., reset: _Optional[_Union[ResetResponse, _Mapping]] = ..., step: _Optional[_Union[StepResponse, _Mapping]] = ..., state: _Optional[_Union[StateResponse, _Mapping]] = ..., list_tools: _Optional[_Union[_tool_pb2.ListToolsResponse, _Mapping]] = ..., call_tool: _Optional[_Union[_tool_pb2.CallToolResponse, _Mapping]] = ..., close: _Optional[_Union[CloseResponse, _Mapping]] = ..., batch_reset: _Optional[_Union[BatchResetResponse, _Mapping]] = ..., batch_step: _Optional[_Union[BatchStepResponse, _Mapping]] = ..., snapshot: _Optional[_Union[SnapshotResponse, _Mapping]] = ..., restore: _Optional[_Union[RestoreResponse, _Mapping]] = ..., fork: _Optional[_Union[ForkResponse, _Mapping]] = ..., list_tasks: _Optional[_Union[_task_pb2.ListTasksResponse, _Mapping]] = ..., pipelined: _Optional[_Union[PipelinedResponses, _Mapping]] = ..., observe: _Optional[_Union[ObserveResponse, _Mapping]] = ..., error: _Optional[_Union[_error_pb2.Status, _Mapping]] = ...) -> None: ...

class HandshakeRequest(_message.Message):
    __slots__ = ("protocol_version", "client_name", "options", "num_envs", "autoreset_mode", "resume_token", "resumable", "known_info_digest", "world")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    AUTORESET_MODE_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    KNOWN_INFO_DIGEST_FIELD_NUMBER: _ClassVar[int]
    WORLD_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    client_name: str
    options: _struct_pb2.Struct
    num_envs: int
    autoreset_mode: AutoresetMode
    resume_token: str
    resumable: bool
    known_info_digest: str
    world: _multiagent_pb2.WorldRequest
    def __init__(self, protocol_version: _Optional[str] = ..., client_name: _Optional[str] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., num_envs: _Optional[int] = ..., autoreset_mode: _Optional[_Union[AutoresetMode, str]] = ..., resume_token: _Optional[str] = ..., resumable: _Optional[bool] = ..., known_info_digest: _Optional[str] = ..., world: _Optional[_Union[_multiagent_pb2.WorldRequest, _Mapping]] = ...) -> None: ...

class HandshakeResponse(_message.Message):
    __slots__ = ("session_id", "protocol_version", "info", "resume_token", "resumed", "info_digest", "world")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    INFO_DIGEST_FIELD_NUMBER: _ClassVar[int]
    WORLD_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    protocol_version: str
    info: EnvironmentInfo
    resume_token: str
    resumed: bool
    info_digest: str
    world: _multiagent_pb2.WorldInfo
    def __init__(self, session_id: _Optional[str] = ..., protocol_version: _Optional[str] = ..., info: _Optional[_Union[EnvironmentInfo, _Mapping]] = ..., resume_token: _Optional[str] = ..., resumed: _Optional[bool] = ..., info_digest: _Optional[str] = ..., world: _Optional[_Union[_multiagent_pb2.WorldInfo, _Mapping]] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("seed", "episode_id", "options", "task_id")
    SEED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    seed: int
    episode_id: str
    options: _struct_pb2.Struct
    task_id: str
    def __init__(self, seed: _Optional[int] = ..., episode_id: _Optional[str] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., task_id: _Optional[str] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("time_step",)
    TIME_STEP_FIELD_NUMBER: _ClassVar[int]
    time_step: TimeStep
    def __init__(self, time_step: _Optional[_Union[TimeStep, _Mapping]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("action", "timeout", "agent_id", "actions")
    class ActionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _payload_pb2.Payload
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_payload_pb2.Payload, _Mapping]] = ...) -> None: ...
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    action: _payload_pb2.Payload
    timeout: _duration_pb2.Duration
    agent_id: str
    actions: _containers.MessageMap[str, _payload_pb2.Payload]
    def __init__(self, action: _Optional[_Union[_payload_pb2.Payload, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., agent_id: _Optional[str] = ..., actions: _Optional[_Mapping[str, _payload_pb2.Payload]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("time_step",)
    TIME_STEP_FIELD_NUMBER: _ClassVar[int]
    time_step: TimeStep
    def __init__(self, time_step: _Optional[_Union[TimeStep, _Mapping]] = ...) -> None: ...

class TimeStep(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "metadata", "reward_breakdown", "episode_id", "step_count", "agents", "to_act", "seat_events")
    class AgentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _multiagent_pb2.AgentTimeStep
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_multiagent_pb2.AgentTimeStep, _Mapping]] = ...) -> None: ...
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REWARD_BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    TO_ACT_FIELD_NUMBER: _ClassVar[int]
    SEAT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    observation: _payload_pb2.Payload
    reward: float
    terminated: bool
    truncated: bool
    metadata: _struct_pb2.Struct
    reward_breakdown: _rubric_pb2.RubricScore
    episode_id: str
    step_count: int
    agents: _containers.MessageMap[str, _multiagent_pb2.AgentTimeStep]
    to_act: _containers.RepeatedScalarFieldContainer[str]
    seat_events: _containers.RepeatedCompositeFieldContainer[_multiagent_pb2.SeatEvent]
    def __init__(self, observation: _Optional[_Union[_payload_pb2.Payload, _Mapping]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., reward_breakdown: _Optional[_Union[_rubric_pb2.RubricScore, _Mapping]] = ..., episode_id: _Optional[str] = ..., step_count: _Optional[int] = ..., agents: _Optional[_Mapping[str, _multiagent_pb2.AgentTimeStep]] = ..., to_act: _Optional[_Iterable[str]] = ..., seat_events: _Optional[_Iterable[_Union[_multiagent_pb2.SeatEvent, _Mapping]]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("wait", "timeout", "seat_events")
    WAIT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SEAT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    wait: bool
    timeout: _duration_pb2.Duration
    seat_events: bool
    def __init__(self, wait: _Optional[bool] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., seat_events: _Optional[bool] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("time_step",)
    TIME_STEP_FIELD_NUMBER: _ClassVar[int]
    time_step: TimeStep
    def __init__(self, time_step: _Optional[_Union[TimeStep, _Mapping]] = ...) -> None: ...

class StateRequest(_message.Message):
    __slots__ = ("env_id",)
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    env_id: int
    def __init__(self, env_id: _Optional[int] = ...) -> None: ...

class StateResponse(_message.Message):
    __slots__ = ("episode_id", "step_count", "status", "state")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    step_count: int
    status: EpisodeStatus
    state: _payload_pb2.Payload
    def __init__(self, episode_id: _Optional[str] = ..., step_count: _Optional[int] = ..., status: _Optional[_Union[EpisodeStatus, str]] = ..., state: _Optional[_Union[_payload_pb2.Payload, _Mapping]] = ...) -> None: ...

class BatchResetRequest(_message.Message):
    __slots__ = ("env_ids", "seeds", "options", "task_ids")
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    env_ids: _containers.RepeatedScalarFieldContainer[int]
    seeds: _containers.RepeatedScalarFieldContainer[int]
    options: _struct_pb2.Struct
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, env_ids: _Optional[_Iterable[int]] = ..., seeds: _Optional[_Iterable[int]] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchResetResponse(_message.Message):
    __slots__ = ("env_ids", "time_steps")
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    TIME_STEPS_FIELD_NUMBER: _ClassVar[int]
    env_ids: _containers.RepeatedScalarFieldContainer[int]
    time_steps: _containers.RepeatedCompositeFieldContainer[TimeStep]
    def __init__(self, env_ids: _Optional[_Iterable[int]] = ..., time_steps: _Optional[_Iterable[_Union[TimeStep, _Mapping]]] = ...) -> None: ...

class BatchStepRequest(_message.Message):
    __slots__ = ("env_ids", "actions", "timeout")
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    env_ids: _containers.RepeatedScalarFieldContainer[int]
    actions: _containers.RepeatedCompositeFieldContainer[_payload_pb2.Payload]
    timeout: _duration_pb2.Duration
    def __init__(self, env_ids: _Optional[_Iterable[int]] = ..., actions: _Optional[_Iterable[_Union[_payload_pb2.Payload, _Mapping]]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class BatchStepResponse(_message.Message):
    __slots__ = ("env_ids", "time_steps", "final_time_steps")
    class FinalTimeStepsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: TimeStep
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[TimeStep, _Mapping]] = ...) -> None: ...
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    TIME_STEPS_FIELD_NUMBER: _ClassVar[int]
    FINAL_TIME_STEPS_FIELD_NUMBER: _ClassVar[int]
    env_ids: _containers.RepeatedScalarFieldContainer[int]
    time_steps: _containers.RepeatedCompositeFieldContainer[TimeStep]
    final_time_steps: _containers.MessageMap[int, TimeStep]
    def __init__(self, env_ids: _Optional[_Iterable[int]] = ..., time_steps: _Optional[_Iterable[_Union[TimeStep, _Mapping]]] = ..., final_time_steps: _Optional[_Mapping[int, TimeStep]] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("format", "env_name", "env_version", "episode_id", "step_count", "status", "environment", "rubric", "digest")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ENV_NAME_FIELD_NUMBER: _ClassVar[int]
    ENV_VERSION_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUBRIC_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    format: int
    env_name: str
    env_version: str
    episode_id: str
    step_count: int
    status: EpisodeStatus
    environment: bytes
    rubric: bytes
    digest: bytes
    def __init__(self, format: _Optional[int] = ..., env_name: _Optional[str] = ..., env_version: _Optional[str] = ..., episode_id: _Optional[str] = ..., step_count: _Optional[int] = ..., status: _Optional[_Union[EpisodeStatus, str]] = ..., environment: _Optional[bytes] = ..., rubric: _Optional[bytes] = ..., digest: _Optional[bytes] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class RestoreResponse(_message.Message):
    __slots__ = ("episode_id", "step_count", "status")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    step_count: int
    status: EpisodeStatus
    def __init__(self, episode_id: _Optional[str] = ..., step_count: _Optional[int] = ..., status: _Optional[_Union[EpisodeStatus, str]] = ...) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("count", "snapshot")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    count: int
    snapshot: Snapshot
    def __init__(self, count: _Optional[int] = ..., snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("session_ids", "resume_tokens")
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKENS_FIELD_NUMBER: _ClassVar[int]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    resume_tokens: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_ids: _Optional[_Iterable[str]] = ..., resume_tokens: _Optional[_Iterable[str]] = ...) -> None: ...

class PipelinedRequests(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[SessionRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[SessionRequest, _Mapping]]] = ...) -> None: ...

class PipelinedResponses(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[SessionResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[SessionResponse, _Mapping]]] = ...) -> None: ...
