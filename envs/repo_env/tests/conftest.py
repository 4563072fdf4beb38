"""The repository environment's tests need bubblewrap (its sandbox): required when CI is set,
skipped with the reason elsewhere (``apt-get install bubblewrap``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _needs_bubblewrap() -> None:
    if shutil.which("bwrap"):
        return
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail("bubblewrap is not installed; CI requires the sandbox tests", pytrace=False)
    pytest.skip("bubblewrap is not installed (apt-get install bubblewrap): repo_env cannot run code")


# -- the repository-task factory's tests (test_factory*.py): one package of their own, packed as
# an sdist into a cache of their own and pinned in a packages.json of their own (no registry),
# and one set built from it per session (the tests share it: mark them
# xdist_group("repo_factory") so they run on one worker).

FACTORY_FIXTURE = Path(__file__).resolve().parent / "factory_fixture" / "tally-1.0"


@dataclass
class Pinned:
    root: Path
    cache: Path
    manifest: Path
    sdist: Path


@dataclass
class Built:
    pinned: Pinned
    out: Path
    result: Any


@pytest.fixture(scope="session")
def factory_pinned(tmp_path_factory: pytest.TempPathFactory) -> Pinned:
    root = tmp_path_factory.mktemp("factory")
    cache = root / "cache"
    (cache / "sdists").mkdir(parents=True)
    sdist = cache / "sdists" / "tally-1.0.tar.gz"

    def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if "__pycache__" in ti.name or ".pytest_cache" in ti.name else ti

    with tarfile.open(sdist, "w:gz") as t:
        t.add(FACTORY_FIXTURE, arcname="tally-1.0", filter=keep)
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    manifest = root / "packages.json"
    entry = {"name": "tally", "version": "1.0", "sha256": sha, "kind": "test fixture", "import_root": ".",
             "mutate": ["tally"], "tests": ["tests"], "ignore": [], "deps": []}  # fmt: skip
    manifest.write_text(json.dumps({"packages": [entry]}), encoding="utf-8")
    # What takes no cache argument (the environment's tasks) reads trees from this one.
    os.environ["REPO_FACTORY_CACHE"] = str(cache)
    return Pinned(root, cache, manifest, sdist)


@pytest.fixture(scope="session")
def factory_built(factory_pinned: Pinned) -> Built:
    from repo_env.factory.build import build

    out = factory_pinned.root / "built"
    r = build(out, per_package=8, workers=2, cache=str(factory_pinned.cache), manifest=factory_pinned.manifest)
    return Built(factory_pinned, out, r)
