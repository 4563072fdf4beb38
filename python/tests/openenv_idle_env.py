"""An environment that reports which modules its server process has imported (for
test_lazy_imports.py: it is served by ``openenv serve`` in a subprocess, so it imports nothing
beyond openenv itself)."""

from __future__ import annotations

import sys
from typing import Any

import openenv


class ImportedModules(openenv.Environment):
    """``step({"modules": [...]})``: the observation lists those of the modules already imported."""

    max_sessions = 2

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> list[str]:
        return []

    def step(self, action: Any) -> list[str]:
        return sorted(name for name in action["modules"] if name in sys.modules)
