"""A built set of factory instances: ``instances.jsonl`` (one instance a line) and
``manifest.json`` in a directory, or the set shipped with this package (``data/``, gzipped).

An instance's repository is its package's pristine tree (fetched by name, version and hash)
with the instance's bug planted (:func:`repository`); its reference patch restores the
pristine files.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from repo_env.factory import mutate
from repo_env.factory.sources import Package, fetch, load_packages, tree_files

__all__ = ["SHIPPED", "Instance", "InstanceSet", "load_instances", "repository"]

SHIPPED = Path(__file__).resolve().parent / "data"


@dataclasses.dataclass(frozen=True)
class Instance:
    """One validated instance (the fields of its ``instances.jsonl`` line)."""

    id: str
    package: str
    version: str
    split: str
    tier: str
    operators: tuple[str, ...]
    files: tuple[str, ...]
    functions: tuple[str, ...]
    mutations: tuple[dict[str, Any], ...]
    issue: str
    patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Instance:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in fields})

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


class InstanceSet(Sequence[Instance]):
    """Instances with unique ids, in file order, and the manifest they came with."""

    def __init__(self, instances: Sequence[Instance], manifest: Mapping[str, Any] | None = None) -> None:
        self._items = tuple(instances)
        self._by_id = {i.id: i for i in self._items}
        if len(self._by_id) != len(self._items):
            raise ValueError("duplicate instance ids")
        self.manifest = dict(manifest or {})

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Instance]:
        return iter(self._items)

    def package(self, name: str) -> Package:
        """The package an instance was built from: as the set's manifest records it (its
        version, hash and layout), else the pinned one of that name."""
        for entry in self.manifest.get("packages", []):
            if entry.get("name") == name and "import_root" in entry:
                fields = {f.name for f in dataclasses.fields(Package)}
                return Package(**{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items() if k in fields})
        (pkg,) = load_packages(names=[name])
        return pkg

    def by_id(self, iid: str) -> Instance:
        try:
            return self._by_id[iid]
        except KeyError:
            raise KeyError(f"no instance {iid!r}") from None

    def select(
        self, *, split: str | None = None, tier: str | None = None, package: str | None = None
    ) -> list[Instance]:
        return [
            i
            for i in self._items
            if (split is None or i.split == split)
            and (tier is None or i.tier == tier)
            and (package is None or i.package == package)
        ]

    def sample(self, n: int, seed: int = 0, **where: str | None) -> list[Instance]:
        """``n`` instances drawn with ``seed`` (stable), one package after another in turn so a
        small sample spans the packages."""
        pool = self.select(**where)
        rng = random.Random(seed)
        by_pkg: dict[str, list[Instance]] = {}
        for i in pool:
            by_pkg.setdefault(i.package, []).append(i)
        for v in by_pkg.values():
            rng.shuffle(v)
        order = sorted(by_pkg)
        rng.shuffle(order)
        out: list[Instance] = []
        while len(out) < n and any(by_pkg.values()):
            for p in order:
                if by_pkg[p] and len(out) < n:
                    out.append(by_pkg[p].pop())
        return out


def _read_lines(directory: Path) -> tuple[bytes, Path]:
    for name in ("instances.jsonl", "instances.jsonl.gz"):
        p = directory / name
        if p.is_file():
            data = p.read_bytes()
            return (gzip.decompress(data) if name.endswith(".gz") else data), p
    raise FileNotFoundError(f"no instances.jsonl(.gz) in {directory}")


def load_instances(directory: str | os.PathLike[str] = SHIPPED, *, verify: bool = True) -> InstanceSet:
    """The instances in ``directory`` (default: the shipped set); with ``verify``, ValueError
    when their hash is not the manifest's."""
    d = Path(directory)
    data, _ = _read_lines(d)
    manifest: dict[str, Any] = {}
    if (d / "manifest.json").is_file():
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        want = manifest.get("instances_sha256")
        if verify and want and hashlib.sha256(data).hexdigest() != want:
            raise ValueError(f"{d}: instances do not match the manifest's sha256 (edited or truncated)")
    items = [Instance.from_dict(json.loads(line)) for line in data.decode("utf-8").splitlines() if line.strip()]
    return InstanceSet(items, manifest)


_TREES: dict[str, dict[str, str]] = {}


def package_of(inst: Instance, instances: InstanceSet | None = None) -> Package:
    """The package of ``inst`` (from ``instances``' manifest when given); ValueError when its
    version is not the one the instance was built from."""
    pkg = instances.package(inst.package) if instances is not None else load_packages(names=[inst.package])[0]
    if pkg.version != inst.version:
        raise ValueError(f"{inst.id}: built from {inst.package} {inst.version}, pinned {pkg.version}")
    return pkg


def pristine(pkg: Package, cache: str | None = None) -> dict[str, str]:
    """The package's tree, path -> text (read once per package and process)."""
    if pkg.key not in _TREES:
        _TREES[pkg.key] = tree_files(fetch(pkg, cache))
    return _TREES[pkg.key]


def repository(inst: Instance, pkg: Package, cache: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(the buggy repository, the reference fix's files): the package's pristine tree with the
    instance's bug planted, and the pristine versions of the files the bug changed."""
    files = dict(pristine(pkg, cache))
    muts = [mutate.Mutation.from_dict(m) for m in inst.mutations]
    fix: dict[str, str] = {}
    for path in dict.fromkeys(m.path for m in muts):
        fix[path] = files[path]
        files[path] = mutate.apply(files[path], [m for m in muts if m.path == path])
    return files, fix
