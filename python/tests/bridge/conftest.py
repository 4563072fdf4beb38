"""The bridge tests: this directory holds their helpers (``bridge_kit``), our test
environments (``bridge_envs``) and the files run inside the upstream OpenEnv venv
(``upstream_*.py``, never imported here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The upstream_*.py files import OpenEnv's package, which only its own venv has."""
    if collection_path.parent == HERE and collection_path.name.startswith("upstream_"):
        return True
    return None
