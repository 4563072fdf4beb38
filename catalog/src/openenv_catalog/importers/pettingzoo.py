"""``pettingzoo:ID[:parallel]``: any PettingZoo environment as a multi-agent openenv environment.

``ID`` is an id of PettingZoo's registries (``classic/tictactoe-v3``, ``classic/rps-v2``; an
environment another package registered with ``pettingzoo.register`` too), or the path of any
module with PettingZoo's ``env()`` / ``parallel_env()`` factories (``mypackage.myenv_v0``).
The ``AECEnv`` is served turn-based by default; ``:parallel`` serves the ``ParallelEnv``,
simultaneous (:mod:`openenv_catalog.games.pettingzoo`).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from typing import Any

from openenv_catalog.games.bind import environment
from openenv_catalog.games.pettingzoo import AECGame, ParallelGame
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CURATED", "load"]

# Listed and certified (each costs a certification in CI); catalog/tests/test_games.py plays
# the Parallel API (classic/rps-v2:parallel) through PettingZoo's parallel_api_test.
CURATED = ("classic/tictactoe-v3",)

# What PettingZoo's classic games are but do not declare (RFC 0016): zero-sum (their rewards are
# +1/-1 or chips won and lost) and hidden information (cards in hand), so that the certifier's
# reward-sum and hidden-information checks apply to them. Keyed by the id without its version.
DECLARED: dict[str, dict[str, Any]] = {
    "classic/tictactoe": {"reward_sum": 0.0},
    "classic/connect_four": {"reward_sum": 0.0},
    "classic/rps": {"reward_sum": 0.0},
    "classic/chess": {"reward_sum": 0.0},
    "classic/go": {"reward_sum": 0.0},
    "classic/leduc_holdem": {"reward_sum": 0.0, "hidden_information": True},
    "classic/texas_holdem": {"reward_sum": 0.0, "hidden_information": True},
    "classic/texas_holdem_no_limit": {"reward_sum": 0.0, "hidden_information": True},
    "classic/gin_rummy": {"hidden_information": True},
    "classic/hanabi": {"hidden_information": True},
}


def declared(ident: str) -> dict[str, Any]:
    """The declarations :data:`DECLARED` holds for the PettingZoo id ``ident`` (any version)."""
    return dict(DECLARED.get(re.sub(r"-v\d+$", "", ident), {}))


def _pz() -> Any:
    try:
        import pettingzoo
    except ImportError as e:
        raise ImporterUnavailable(
            f"pettingzoo is not installed: pip install 'protoenv-catalog[pettingzoo]' ({e})"
        ) from e
    return pettingzoo


def _factory(ident: str, api: str) -> Callable[[], Any]:
    """A callable making the environment ``ident`` names, with the ``api`` asked for."""
    pz = _pz()
    registry = pz.aec_registry if api == "aec" else pz.parallel_registry
    if ident in registry:
        factory: Callable[[], Any] = functools.partial(pz.make, api, ident)
        return factory
    if "/" in ident or not re.fullmatch(r"[A-Za-z_][\w.]*", ident):
        known = ", ".join(sorted(registry))
        raise LookupError(f"PettingZoo's {api} registry has no {ident!r}; it has: {known}")
    try:
        module = importlib.import_module(ident)
    except ModuleNotFoundError as e:
        if e.name is not None and not ident.startswith(e.name):
            raise ImporterUnavailable(f"{ident} needs {e.name} ({e})") from e
        raise LookupError(f"no PettingZoo environment {ident!r}: neither a registered id nor a module") from None
    name = "env" if api == "aec" else "parallel_env"
    made = getattr(module, name, None)
    if not callable(made):
        raise LookupError(f"{ident} has no {name}(): not a PettingZoo environment module")
    return made


def load(spec: str) -> type[Any]:
    """The environment class of the PettingZoo environment ``spec`` (``ID``, ``ID:aec`` or ``ID:parallel``)."""
    ident, _, api = spec.partition(":")
    api = api or "aec"
    if api not in ("aec", "parallel") or not ident:
        raise ValueError(f"{spec!r} is not of the form ID, ID:aec or ID:parallel")
    factory = _factory(ident, api)
    try:
        factory().close()
    except ImportError as e:  # the environment's own dependencies (pygame for the classic games)
        raise ImporterUnavailable(f"{ident} cannot be made: {e} (pip install 'protoenv-catalog[pettingzoo]')") from e
    base = AECGame if api == "aec" else ParallelGame
    slug = re.sub(r"[^a-z0-9]+", "-", spec.lower()).strip("-")
    game_cls = type(f"PettingZoo_{slug.replace('-', '_')}", (base,), {"factory": staticmethod(factory)})
    mode = "Parallel API, simultaneous" if api == "parallel" else "AEC API, turn by turn"
    return environment(
        game_cls,
        name=f"pettingzoo-{slug}",
        version=str(getattr(_pz(), "__version__", "1")),
        description=f"PettingZoo's {ident} ({mode}), imported: each agent's own view, PettingZoo's rewards.",
        source=f"pettingzoo:{spec}",
        kind="game",
        **declared(ident),
    )
