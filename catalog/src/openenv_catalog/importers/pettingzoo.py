"""``pettingzoo:MODULE[:parallel]``: any PettingZoo environment as a multi-agent openenv environment.

``MODULE`` is a module with PettingZoo's ``env()`` / ``parallel_env()`` factories: a path
inside ``pettingzoo`` (``classic.tictactoe_v3``) or any importable module
(``mypackage.myenv_v0``). The ``AECEnv`` (``env()``) is served turn-based by default;
``:parallel`` serves the ``ParallelEnv`` (``parallel_env()``), simultaneous
(:mod:`openenv_catalog.games.pettingzoo`).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from openenv_catalog.games.bind import environment
from openenv_catalog.games.pettingzoo import AECGame, ParallelGame
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CURATED", "load"]

CURATED = (
    "classic.tictactoe_v3",
    "classic.connect_four_v3",
    "classic.rps_v2:parallel",
)


def _module(path: str) -> Any:
    try:
        import pettingzoo
    except ImportError as e:
        raise ImporterUnavailable(f"pettingzoo is not installed: pip install 'protoenv-catalog[pettingzoo]' ({e})") from e
    errors = []
    for candidate in (f"pettingzoo.{path}", path):
        try:
            return importlib.import_module(candidate)
        except ModuleNotFoundError as e:
            if e.name is not None and not candidate.startswith(e.name):
                raise ImporterUnavailable(f"{candidate} needs {e.name}: pip install 'protoenv-catalog[pettingzoo]' ({e})") from e
            errors.append(f"{candidate}: {e}")
    del pettingzoo
    raise LookupError(f"no PettingZoo environment module {path!r} ({'; '.join(errors)})")


def load(spec: str) -> type[Any]:
    """The environment class of the PettingZoo environment ``spec`` (``MODULE[:parallel|:aec]``)."""
    path, _, api = spec.partition(":")
    api = api or "aec"
    if api not in ("aec", "parallel") or not re.fullmatch(r"[A-Za-z_][\w.]*", path):
        raise ValueError(f"{spec!r} is not of the form MODULE, MODULE:aec or MODULE:parallel")
    module = _module(path)
    factory_name = "env" if api == "aec" else "parallel_env"
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise LookupError(f"{module.__name__} has no {factory_name}(): not a PettingZoo environment module")
    base = AECGame if api == "aec" else ParallelGame
    ident = re.sub(r"[^a-z0-9]+", "-", spec.lower()).strip("-")
    game_cls = type(f"PettingZoo_{ident.replace('-', '_')}", (base,), {"factory": staticmethod(factory)})
    title = str(getattr(getattr(module, "raw_env", None), "metadata", {}).get("name", path))
    return environment(
        game_cls,
        name=f"pettingzoo-{ident}",
        version=str(getattr(importlib.import_module("pettingzoo"), "__version__", "1")),
        description=f"PettingZoo's {title} ({'Parallel API, simultaneous' if api == 'parallel' else 'AEC API, turn by turn'}), imported.",
        source=f"pettingzoo:{spec}",
        kind="game",
    )
