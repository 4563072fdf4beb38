"""Typed client of the gridworld environment."""

from __future__ import annotations

import openenv
from gridworld.v1 import gridworld_pb2

__all__ = ["GridWorldEnv"]


class GridWorldEnv(openenv.EnvClient):
    """Client of the gridworld environment: steps take a :class:`gridworld.Action`,
    observations are :class:`gridworld.Observation` and ``state().state`` is a
    :class:`gridworld.State`, all decoded and type-checked against the declared messages.

    ::

        async with GridWorldEnv("grpc://127.0.0.1:50051") as env:
            r = await env.reset(seed=7)
            r = await env.step(Action(move=Move.MOVE_RIGHT))
    """

    action_type = gridworld_pb2.Action
    observation_type = gridworld_pb2.Observation
    state_type = gridworld_pb2.State
