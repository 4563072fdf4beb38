"""The factory's inputs: real packages' source distributions, pinned by name, version and hash
(``packages.json`` beside this module), fetched through the package registries this machine
reaches with the ordinary client (``pip download --no-binary :all: --no-deps NAME==VERSION``)
and unpacked into a cache.

A package's entry::

    {"name": "cachetools", "version": "8.0.3", "sha256": "...", "kind": "data structures",
     "import_root": "src", "mutate": ["src/cachetools"], "tests": ["tests"], "ignore": [...],
     "deps": []}

``import_root`` is the directory put on ``sys.path`` (the package's own layout: ``src`` or
the tree's root), ``mutate`` the source files or directories bugs are planted in, ``tests`` and
``ignore`` the pytest paths of its suite (tests needing what the factory does not install are
ignored), ``deps`` the test requirements beyond pytest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["MANIFEST", "Package", "cache_dir", "fetch", "load_packages", "source_files", "tree_files"]

MANIFEST = Path(__file__).resolve().parent / "packages.json"
#: What a tree keeps: the files tests and code may read. Build artefacts, caches, binaries go.
_KEEP_SUFFIXES = {
    ".py", ".pyi", ".txt", ".cfg", ".toml", ".ini", ".json", ".md", ".rst", ".in", ".yaml", ".yml",
    ".csv", ".xml", ".html", ".htm", ".css", ".js", ".typed", ".tsv", ".docopt", ".text", ".markdown", ".svg",
}  # fmt: skip
MAX_TREE_FILE_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str
    kind: str
    import_root: str = "."
    mutate: tuple[str, ...] = ()
    tests: tuple[str, ...] = ("tests",)
    ignore: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``name-version``: the directory of its tree in the cache."""
        return f"{self.name}-{self.version}"

    def to_dict(self) -> dict[str, object]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def load_packages(path: str | os.PathLike[str] = MANIFEST, names: Sequence[str] | None = None) -> list[Package]:
    """The pinned packages (those named, when ``names`` is given; KeyError for an unknown one)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    pkgs = [
        Package(**{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}) for entry in data["packages"]
    ]
    if names:
        by = {p.name: p for p in pkgs}
        missing = [n for n in names if n not in by]
        if missing:
            raise KeyError(f"unknown package(s) {', '.join(missing)}; known: {', '.join(sorted(by))}")
        return [by[n] for n in names]
    return pkgs


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """Where sdists and trees are kept: ``path``, else ``$REPO_FACTORY_CACHE``, else
    ``~/.cache/openenv/repo-factory``."""
    p = Path(path or os.environ.get("REPO_FACTORY_CACHE") or Path.home() / ".cache" / "openenv" / "repo-factory")
    p.mkdir(parents=True, exist_ok=True)
    return p


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(pkg: Package, cache: Path) -> Path:
    """The package's sdist in the cache, downloaded with pip when missing; ValueError when its
    hash is not the pinned one (the file is then removed, never used)."""
    sdists = cache / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    found = _find_sdist(sdists, pkg)
    if found is None:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
               f"{pkg.name}=={pkg.version}", "-d", str(sdists)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        found = _find_sdist(sdists, pkg)
        if r.returncode != 0 or found is None:
            raise RuntimeError(f"pip download {pkg.name}=={pkg.version} failed: {(r.stderr or r.stdout)[-500:]}")
    digest = _sha256(found)
    if pkg.sha256 and digest != pkg.sha256:
        found.unlink()
        raise ValueError(f"{found.name}: sha256 {digest}, pinned {pkg.sha256}: refused")
    return found


def _find_sdist(directory: Path, pkg: Package) -> Path | None:
    norm = pkg.name.lower().replace("-", "_").replace(".", "_")
    for p in sorted(directory.iterdir()):
        stem = p.name.lower().replace("-", "_").replace(".", "_")
        if stem.startswith(f"{norm}_{pkg.version.replace('.', '_')}") and p.name.endswith((".tar.gz", ".zip")):
            return p
    return None


def fetch(pkg: Package, cache: str | os.PathLike[str] | None = None) -> Path:
    """The package's unpacked tree in the cache (downloaded and checked first when needed):
    the sdist's files that tests and code read (:func:`tree_files`), no bytecode, no binaries."""
    root = cache_dir(cache)
    tree = root / "trees" / pkg.key
    if (tree / ".complete").is_file():
        return tree
    sdist = download(pkg, root)
    tmp = root / "trees" / f".{pkg.key}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as z:
            for info in z.infolist():
                if not info.is_dir() and ".." not in Path(info.filename).parts and not info.filename.startswith("/"):
                    z.extract(info, tmp)
    else:
        with tarfile.open(sdist) as t:
            t.extractall(tmp, filter="data")
    (top,) = [p for p in tmp.iterdir() if p.is_dir()]
    for p in sorted(top.rglob("*"), reverse=True):
        if p.is_symlink() or (p.is_file() and not _keep(p)):
            p.unlink()
        elif p.is_dir() and (p.name == "__pycache__" or p.name.endswith(".egg-info")):
            shutil.rmtree(p)
    (top / ".complete").write_text(_sha256(sdist) + "\n", encoding="utf-8")
    shutil.rmtree(tree, ignore_errors=True)
    tree.parent.mkdir(parents=True, exist_ok=True)
    top.rename(tree)
    shutil.rmtree(tmp, ignore_errors=True)
    return tree


def _keep(p: Path) -> bool:
    return (p.suffix.lower() in _KEEP_SUFFIXES or p.name in ("PKG-INFO", "LICENSE", "README", "Makefile")) and (
        p.stat().st_size <= MAX_TREE_FILE_BYTES
    )


def tree_files(tree: Path) -> dict[str, str]:
    """The tree's text files, path -> text (what an agent's repository holds)."""
    out = {}
    for p in sorted(tree.rglob("*")):
        if p.is_file() and p.name != ".complete":
            try:
                out[p.relative_to(tree).as_posix()] = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return out


def source_files(pkg: Package, tree: Path) -> Iterator[str]:
    """The package's source modules that bugs are planted in (relative paths, sorted): the
    ``.py`` files under its ``mutate`` paths, tests and ``conftest.py`` excluded."""
    found: set[str] = set()
    for m in pkg.mutate:
        p = tree / m
        for f in [p] if p.is_file() else sorted(p.rglob("*.py")):
            rel = f.relative_to(tree).as_posix()
            parts = set(Path(rel).parts)
            if parts & {"tests", "test", "testing"} or f.name.startswith(("test_", "conftest")):
                continue
            found.add(rel)
    return iter(sorted(found))
