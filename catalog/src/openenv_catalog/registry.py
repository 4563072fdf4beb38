"""The catalog: every environment installed packages make available.

Two entry-point groups feed it, so installing a package adds to it:

* ``openenv.environments``: ``name = "module:Class"`` (native environments, e.g. envs/*);
* ``openenv.importers``: ``source = "module:load"``; the module's ``CURATED`` ids are listed as
  ``import:SOURCE:ID`` (the importer must be installed with its package); its
  ``REPRESENTATIVES`` (default: the first curated id) are the entries whose full
  certification covers the importer's generic code (openenv_catalog.certify).

Each :class:`Entry` carries what ``openenv catalog`` shows and the last certification
recorded in ``certified.json`` (written by ``openenv catalog certify --write``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CERTIFIED_FILE", "Entry", "certifications", "entries", "skipped_importers"]

CERTIFIED_FILE = Path(__file__).with_name("certified.json")


@dataclasses.dataclass
class Entry:
    """One catalog environment. ``target`` is what ``openenv serve`` takes."""

    name: str
    kind: str
    source: str
    target: str
    description: str = ""
    tools: list[str] = dataclasses.field(default_factory=list)
    tasks: str = ""
    certified: dict[str, Any] | None = None
    max_examples: int | None = None
    """At most this many examples per search when certified (``metadata["certify_max_examples"]``:
    an environment whose every step is expensive, e.g. a browser), whatever the run asks."""
    timeout: float | None = None
    """At least this many seconds to wait for any one answer when certified
    (``metadata["certify_timeout"]``), whatever the run asks."""
    importer: str = ""
    """The importer (``openenv.importers`` entry point) of an imported entry; "" for a native one."""
    representative: bool = False
    """Certified in full for its importer (natives always are); other entries get an entry certificate."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def certifications() -> dict[str, Any]:
    """The recorded certifications, by environment name."""
    try:
        data: dict[str, Any] = json.loads(CERTIFIED_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return data


def _describe(cls: Any, *, name: str, kind: str, source: str, target: str) -> Entry:
    tools = sorted(getattr(cls, "__openenv_tools__", {}) or {})
    meta = dict(getattr(cls, "metadata", {}) or {})
    tasks = str(meta.get("tasks", ""))
    cap, wait = meta.get("certify_max_examples"), meta.get("certify_timeout")
    return Entry(
        name=name,
        kind=str(meta.get("kind", kind)),
        source=source,
        target=target,
        description=str(getattr(cls, "description", "") or "").split("\n")[0],
        tools=tools,
        tasks=tasks,
        max_examples=int(cap) if isinstance(cap, int) and cap > 0 else None,
        timeout=float(wait) if isinstance(wait, (int, float)) and wait > 0 else None,
    )


_SKIPPED: dict[str, str] = {}


def skipped_importers() -> dict[str, str]:
    """Importers whose package is missing or unusable (source -> reason), from the last listing."""
    return dict(_SKIPPED)


def entries() -> list[Entry]:
    """Every catalog environment, native first, then imported, each sorted by name."""
    certs = certifications()
    native: list[Entry] = []
    for ep in importlib.metadata.entry_points(group="openenv.environments"):
        try:
            cls = ep.load()
        except ImportError as e:  # a broken package must not hide the rest of the catalog
            native.append(Entry(ep.name, "native", ep.dist.name if ep.dist else "?", ep.value, f"unavailable: {e}"))
            continue
        dist = ep.dist.name if ep.dist else "?"
        entry = _describe(cls, name=cls.name or ep.name, kind="native", source=dist, target=ep.value)
        entry.representative = True
        native.append(entry)
    imported: list[Entry] = []
    _SKIPPED.clear()
    for ep in importlib.metadata.entry_points(group="openenv.importers"):
        module = importlib.import_module(ep.module)
        load = ep.load()
        curated = tuple(getattr(module, "CURATED", ()))
        representatives = set(getattr(module, "REPRESENTATIVES", curated[:1]))
        for ident in curated:
            try:
                cls = load(ident)
            except ImporterUnavailable as e:  # the importer's package: none of its entries
                _SKIPPED[ep.name] = str(e)
                break
            except (ImportError, LookupError) as e:  # a package this one entry needs, or a gone id
                _SKIPPED[f"{ep.name}:{ident}"] = str(e)
                continue
            entry = _describe(
                cls, name=cls.name, kind="imported", source=f"{ep.name}:{ident}", target=f"import:{ep.name}:{ident}"
            )
            entry.importer, entry.representative = ep.name, ident in representatives
            imported.append(entry)
        else:
            if not curated and hasattr(module, "REASON"):
                _SKIPPED[ep.name] = str(module.REASON)
    out = sorted(native, key=lambda e: e.name) + sorted(imported, key=lambda e: e.name)
    for entry in out:
        entry.certified = certs.get(entry.name)
    return out
