"""Typed client of the echo environment."""

from __future__ import annotations

import openenv


class EchoEnv(openenv.ToolEnvClient):
    """Client of the echo environment: actions are :class:`openenv.CallToolAction`,
    observations :class:`openenv.CallToolObservation` (``.result``, ``.metadata``)."""
