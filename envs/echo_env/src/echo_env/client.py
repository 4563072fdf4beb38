"""Typed client of the echo environment."""

from __future__ import annotations

from typing import Any

import openenv
from openenv.v1 import environment_pb2


class EchoEnv(openenv.EnvClient):
    """Client of the echo environment: actions are :class:`openenv.CallToolAction`,
    observations :class:`openenv.CallToolObservation` (``.result``, ``.metadata``)."""

    action_type = openenv.CallToolAction
    observation_type = openenv.CallToolObservation

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)

    def parse_result(self, ts: environment_pb2.TimeStep) -> openenv.StepResult:
        result = super().parse_result(ts)
        if result.observation is None:
            result.observation = openenv.CallToolObservation()
        result.observation.metadata = result.metadata
        return result
