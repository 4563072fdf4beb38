"""Typed client of the math environment."""

from __future__ import annotations

import openenv


class MathEnv(openenv.ToolEnvClient):
    """Client of the math environment: actions are :class:`openenv.CallToolAction`,
    observations :class:`openenv.CallToolObservation` (``.result``, ``.metadata``);
    ``StepResult.reward_breakdown`` is an :class:`openenv.rubrics.Score`."""
