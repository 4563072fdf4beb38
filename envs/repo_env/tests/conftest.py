"""The repository environment's tests need bubblewrap (its sandbox): required when CI is set,
skipped with the reason elsewhere (``apt-get install bubblewrap``)."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(autouse=True)
def _needs_bubblewrap() -> None:
    if shutil.which("bwrap"):
        return
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail("bubblewrap is not installed; CI requires the sandbox tests", pytrace=False)
    pytest.skip("bubblewrap is not installed (apt-get install bubblewrap): repo_env cannot run code")
