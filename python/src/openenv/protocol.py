"""What both sides of the protocol share: its version, episode statuses, time steps.

These are the plain-Python forms of ``openenv.v1`` values that environment authors return
and trainers receive; they carry no transport and no runtime. docs/protocol.md is the spec.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Generic, TypeVar

from openenv.v1 import environment_pb2

__all__ = ["PROTOCOL_VERSION", "AgentStep", "EpisodeStatus", "SeatEvent", "SessionState", "StepResult"]

PROTOCOL_VERSION = "1.6"
"""The ``MAJOR.MINOR`` this package speaks: 1.0, + RFC 0002 vectorised sessions (1.1), + RFCs
0003-0007 (1.2: hardened listeners, tasks, server load, sessions that survive, strict contract),
+ RFC 0009 pipelined requests in one message (1.3), + RFC 0012 multi-agent worlds and RFC 0013
server workers and the environment description by digest (1.4)."""

ObsT = TypeVar("ObsT")


class EpisodeStatus(enum.IntEnum):
    """Mirror of ``openenv.v1.EpisodeStatus``."""

    NOT_STARTED = environment_pb2.EPISODE_STATUS_NOT_STARTED
    RUNNING = environment_pb2.EPISODE_STATUS_RUNNING
    TERMINATED = environment_pb2.EPISODE_STATUS_TERMINATED
    TRUNCATED = environment_pb2.EPISODE_STATUS_TRUNCATED
    ABORTED = environment_pb2.EPISODE_STATUS_ABORTED


@dataclasses.dataclass
class SessionState:
    """What a state request returns: the runtime's part (episode id, step count, status)
    and the environment-specific ``state``."""

    episode_id: str
    step_count: int
    status: EpisodeStatus
    state: Any


@dataclasses.dataclass
class AgentStep(Generic[ObsT]):
    """One agent's part of a multi-agent time step (RFC 0012, ``AgentTimeStep``): its own view,
    the reward it received since its previous time step (``None``: none, which is not 0), its
    end flags, its private ``metadata`` and its ``reward_breakdown``."""

    observation: ObsT | None = None
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    reward_breakdown: Any = None

    @property
    def done(self) -> bool:
        """True when this agent acts no more this episode (terminated or truncated)."""
        return self.terminated or self.truncated


@dataclasses.dataclass
class SeatEvent:
    """What happened to one seat of a multi-agent world (RFC 0016), as a time step reports it.

    ``kind``: ``"left"`` (the session acting for ``agent_ids`` closed or disconnected: nobody
    acts for them until a session joins for them), ``"joined"`` (a session now acts for them) or
    ``"expired"`` (their rejoin deadline passed with nobody acting for them: the world's vacancy
    rule ended the episode). ``rejoin_within``: for ``"left"`` during a running episode, the
    seconds (from when the time step was built) the seat stays open before the rule applies;
    ``None`` when no deadline applies.
    """

    kind: str
    agent_ids: list[str] = dataclasses.field(default_factory=list)
    rejoin_within: float | None = None


@dataclasses.dataclass
class StepResult(Generic[ObsT]):
    """One time step: what ``reset``/``step`` return and what clients receive.

    ``reward`` is ``None`` when the step has no reward (which is not 0). ``terminated``
    and ``truncated`` have Gymnasium semantics; ``done`` is their disjunction.
    ``metadata`` travels with every transport. ``reward_breakdown`` is the rubric score
    tree (a :class:`openenv.rubrics.Score` on the server, a ``RubricScore`` message or
    :class:`~openenv.rubrics.Score` on the client) when the environment has a rubric.
    ``episode_id`` and ``step_count`` are filled in by the runtime.

    Multi-agent sessions (RFC 0012): ``agents`` maps each agent the session acts for to its
    :class:`AgentStep`; ``to_act`` names the agents to act now (the world's, whoever acts for
    them). The top-level fields are then a summary: the view of the session's agent to act next
    (or of its first agent), the reward of the agent that just acted when the session acts for
    it, and the world's end flags. Both stay empty for a single-agent environment, as does
    ``seat_events`` (RFC 0016).
    """

    observation: ObsT | None = None
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    reward_breakdown: Any = None
    episode_id: str = ""
    step_count: int = 0
    agents: dict[str, AgentStep[ObsT]] = dataclasses.field(default_factory=dict)
    to_act: list[str] = dataclasses.field(default_factory=list)
    seat_events: list[SeatEvent] = dataclasses.field(default_factory=list)
    """Multi-agent (RFC 0016): what happened to the world's seats since this session's last
    time step (another session left, joined, or its rejoin deadline passed), oldest first."""

    @property
    def done(self) -> bool:
        """True when the episode is over (terminated or truncated)."""
        return self.terminated or self.truncated
