"""The openenv environment catalog: native environments and importers (Gymnasium,
reasoning-gym, TextArena, OpenSpiel, PettingZoo), listed by ``openenv catalog`` and certified
by ``openenv catalog certify``; multi-agent games in :mod:`openenv_catalog.games`.
``load("gymnasium:CartPole-v1")`` is the Python API of ``openenv import``."""

from __future__ import annotations

from typing import Any

from openenv_catalog.importers import ImporterUnavailable
from openenv_catalog.registry import Entry, entries

__all__ = ["Entry", "ImporterUnavailable", "entries", "load"]


def load(spec: str) -> Any:
    """The environment class of ``SOURCE:ID`` (or ``import:SOURCE:ID``), as ``openenv serve`` builds it."""
    import importlib.metadata

    source, _, ident = spec.removeprefix("import:").partition(":")
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.importers")}
    if source not in eps or not ident:
        raise LookupError(f"{spec!r}: expected SOURCE:ID with SOURCE one of {', '.join(sorted(eps))}")
    return eps[source].load()(ident)
