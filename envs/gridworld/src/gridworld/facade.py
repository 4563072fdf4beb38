"""gridworld over betterproto2 dataclasses (the ``betterproto`` extra: ``pip install 'gridworld[betterproto]'``).

The same environment and client as :class:`gridworld.GridWorldEnvironment` and
:class:`gridworld.GridWorldEnv`, declared with the betterproto2 classes that ``make generate``
emits for ``gridworld.v1`` (``gridworld.bp.gridworld.v1``) instead of the ``_pb2`` ones. Through
:mod:`openenv.runtime.betterproto` they travel, and are advertised, exactly as the ``_pb2``
messages are, so a ``_pb2`` client plays this server and this client plays the ``_pb2`` server.

The one visible difference is betterproto2's: ``State.total_reward`` of ``-0.0`` (a rounded sum
of rewards that cancel out) is sent as ``0.0``. The cost: see docs/performance.md.

::

    from gridworld.bp.gridworld.v1 import Action, Move

    async with GridWorldBetterprotoEnv("grpc://127.0.0.1:50051") as env:
        r = await env.reset(seed=7)
        r = await env.step(Action(move=Move.RIGHT))   # r.observation: a dataclass
"""

from __future__ import annotations

from typing import Any, ClassVar

from gridworld.bp.gridworld.v1 import Action, Move, Observation, Position, State
from gridworld.client import GridWorldEnv
from gridworld.server import GridWorldEnvironment

__all__ = ["Action", "GridWorldBetterproto", "GridWorldBetterprotoEnv", "Move", "Observation", "Position", "State"]


class GridWorldBetterproto(GridWorldEnvironment):
    """:class:`gridworld.GridWorldEnvironment` with betterproto2 actions, observations and state."""

    description = GridWorldEnvironment.description + " This server builds them as betterproto2 dataclasses."
    action_type = Action
    observation_type = Observation
    state_type = State
    position_type: ClassVar[Any] = Position
    example_actions = tuple(Action(move=m) for m in (Move.UP, Move.DOWN, Move.LEFT, Move.RIGHT))


class GridWorldBetterprotoEnv(GridWorldEnv):
    """:class:`gridworld.GridWorldEnv` whose actions, observations and states are betterproto2 dataclasses."""

    action_type = Action
    observation_type = Observation
    state_type = State
