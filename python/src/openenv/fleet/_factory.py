"""Import an environment named ``module:Attribute`` (as ``openenv serve`` takes it)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["import_target"]


def import_target(spec: str) -> Any:
    """The object ``module:Attr.Sub`` names; ValueError for a malformed spec, ImportError /
    AttributeError when it does not exist."""
    mod_name, sep, attr = spec.partition(":")
    if not (sep and mod_name and attr):
        raise ValueError(f"{spec!r} is not of the form module:Class")
    obj: Any = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
