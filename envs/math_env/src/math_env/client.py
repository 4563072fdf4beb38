"""Typed client of the math environment."""

from __future__ import annotations

import openenv
from openenv.v1 import environment_pb2


class MathEnv(openenv.EnvClient):
    """Client of the math environment: actions are :class:`openenv.CallToolAction`,
    observations :class:`openenv.CallToolObservation` (``.result``, ``.metadata``);
    ``StepResult.reward_breakdown`` is an :class:`openenv.rubrics.Score`."""

    action_type = openenv.CallToolAction
    observation_type = openenv.CallToolObservation

    def parse_result(self, ts: environment_pb2.TimeStep) -> openenv.StepResult:
        result = super().parse_result(ts)
        if result.observation is None:
            result.observation = openenv.CallToolObservation()
        result.observation.metadata = result.metadata
        return result
