"""OpenEnv 0.10's ``openenv.core.harness`` names (what TRL's harness rollout worker imports),
backed by this project's harness: the contract in :mod:`openenv.core.harness.types`, the
factories in :mod:`openenv.core.harness.sessions` (docs/training.md, "TRL's harness worker").

Every name is defined once, in one of those two modules; this package re-exports their
``__all__`` (one list each, not a copy here)."""

from openenv.core.harness import sessions, types
from openenv.core.harness.sessions import *  # noqa: F403 - re-exported: the names are sessions.__all__
from openenv.core.harness.types import *  # noqa: F403 - re-exported: the names are types.__all__

__all__ = [*types.__all__, *sessions.__all__]
