"""``verifiers:MODULE``: not available next to openenv (a documented reason, not a stub).

The ``verifiers`` package (0.4) pins ``mcp==2.0.0`` while openenv's HTTP side requires
``mcp>=2.3``: both cannot be installed in one environment, and its environments load their
datasets from a model hub at run time, which offline machines cannot reach. :func:`load`
says so instead of pretending; once a release relaxes the pin, an importer can wrap a
``verifiers`` environment's dataset, tools and rubric the way the reasoning-gym one does.
"""

from __future__ import annotations

from typing import Any

from openenv_catalog.importers import ImporterUnavailable

__all__ = ["REASON", "load"]

REASON = (
    "verifiers cannot be installed next to openenv: verifiers 0.4 pins mcp==2.0.0 while protoenv[http] "
    "needs mcp>=2.3, and its environments load datasets from a model hub at run time (not offline)"
)


def load(module: str) -> Any:
    """Always raises :class:`ImporterUnavailable` with :data:`REASON`."""
    raise ImporterUnavailable(f"cannot import verifiers:{module}: {REASON}")
