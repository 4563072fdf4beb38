"""Helpers shared by the commands."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from typing import Any

import click

from openenv.errors import EnvError

__all__ = ["fail", "load_factory", "write_ready_file"]


def fail(e: EnvError) -> click.ClickException:
    """An error of the table as a command-line error (exit 1, the message on stderr)."""
    return click.ClickException(str(e))


def write_ready_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically, so a supervisor polling for it never reads half."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_factory(spec: str) -> Any:
    """Import ``module:Attribute`` (an Environment subclass or a factory function), or build
    ``import:SOURCE:ID`` with the importer that an installed distribution registers as
    ``SOURCE`` in the ``openenv.importers`` entry-point group (e.g. protoenv-catalog's
    ``import:gymnasium:CartPole-v1``): a callable taking ``ID`` and returning the factory."""
    if spec.startswith("import:"):
        return _imported(spec)
    if ":" not in spec:
        raise click.BadParameter(f"{spec!r} is not of the form module:Class", param_hint="TARGET")
    mod_name, attr = spec.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise click.BadParameter(f"cannot import {mod_name!r}: {e}", param_hint="TARGET") from e
    obj: Any = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(f"{mod_name!r} has no attribute {attr!r}", param_hint="TARGET") from None
    return obj


def _imported(spec: str) -> Any:
    source, _, ident = spec[len("import:") :].partition(":")
    importers = {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.importers")}
    if source not in importers:
        known = ", ".join(sorted(importers)) or "none (pip install protoenv-catalog)"
        raise click.BadParameter(f"no importer {source!r}; installed importers: {known}", param_hint="TARGET")
    if not ident:
        raise click.BadParameter(f"{spec!r} is not of the form import:{source}:ID", param_hint="TARGET")
    try:
        return importers[source].load()(ident)
    except (ImportError, LookupError, ValueError) as e:
        raise click.BadParameter(f"cannot import {ident!r} from {source}: {e}", param_hint="TARGET") from e
