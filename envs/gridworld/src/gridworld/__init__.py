"""The gridworld reference environment: server (:class:`GridWorldEnvironment`), client
(:class:`GridWorldEnv`) and its ``gridworld.v1`` messages (:class:`Action`, :class:`Move`,
:class:`Observation`, :class:`Position`, :class:`State`)."""

from gridworld.client import GridWorldEnv
from gridworld.server import GridWorldEnvironment
from gridworld.v1.gridworld_pb2 import Action, Move, Observation, Position, State

__all__ = ["Action", "GridWorldEnv", "GridWorldEnvironment", "Move", "Observation", "Position", "State"]
