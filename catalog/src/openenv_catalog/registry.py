"""The catalog: every environment installed packages make available.

Two entry-point groups feed it, so installing a package adds to it:

* ``openenv.environments``: ``name = "module:Class"`` (native environments, e.g. envs/*);
* ``openenv.importers``: ``source = "module:load"``; the module's ``CURATED`` ids are listed as
  ``import:SOURCE:ID`` (the importer must be installed with its package); its
  ``REPRESENTATIVES`` (default: the first curated id) are the entries whose full
  certification covers the importer's generic code (openenv_catalog.certify).

Each :class:`Entry` carries what ``openenv catalog`` shows and the last certification
recorded in ``certified.json`` (written by ``openenv catalog certify --write``).

**The kind of work** (:attr:`Entry.work`, one of :data:`WORK_KINDS`), so a user can pick:

* ``agentic``: multi-step work with tools on a state the agent changes (a shell, a repository,
  a browser, a database), graded at the end by checks it cannot reach;
* ``reasoning``: a question answered in one submission (reasoning-gym datasets, math_env);
* ``game``: a game against the rules or other players (TextArena, OpenSpiel, PettingZoo, chess,
  wordle, connect four);
* ``control``: an observation-action loop over a simulator (Gymnasium, MuJoCo, Atari, a grid,
  a portfolio);
* ``demo``: a protocol example that trains nothing (echo_env).

An environment says its own with ``metadata["work"]``; else the catalog's table
(:data:`NATIVE_WORK` for the native environments, :data:`IMPORTER_WORK` for an importer's
entries) decides; an environment in neither is ``agentic`` when it has tools and ``control``
otherwise.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from openenv_catalog.importers import ImporterUnavailable

__all__ = [
    "CERTIFIED_FILE",
    "IMPORTER_WORK",
    "NATIVE_WORK",
    "WORK_KINDS",
    "Entry",
    "certifications",
    "entries",
    "skipped_importers",
]

CERTIFIED_FILE = Path(__file__).with_name("certified.json")

#: The kinds of work, in the order docs/catalog.md lists them (the agentic sets first).
WORK_KINDS = ("agentic", "reasoning", "game", "control", "demo")
#: The native environments that do not declare ``metadata["work"]``, by name.
NATIVE_WORK = {
    "browser_env": "agentic",
    "coding_env": "agentic",
    "harbor_env": "agentic",
    "repo_env": "agentic",
    "sql_env": "agentic",
    "terminal_env": "agentic",
    "math_env": "reasoning",
    "chess_duel": "game",
    "chess_env": "game",
    "connect_four": "game",
    "wordle": "game",
    "catch": "control",
    "finance-portfolio": "control",
    "gridworld": "control",
    "echo_env": "demo",
}
#: An importer's entries, by importer (``openenv.importers`` entry point).
IMPORTER_WORK = {
    "reasoning_gym": "reasoning",
    "textarena": "game",
    "openspiel": "game",
    "pettingzoo": "game",
    "gymnasium": "control",
    "mujoco": "control",
    "ale": "control",
}


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
    work: str = "control"
    """The kind of work, one of :data:`WORK_KINDS` (the module's docstring says how it is decided)."""
    baselines: str = ""
    """Where the environment's baseline table is (``metadata["baselines_url"]``, a path in this
    repository or a URL): the null agent, the reference solutions, a scripted agent."""

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
    importer = source.split(":", 1)[0] if kind == "imported" else ""
    work = str(
        meta.get("work")
        or (IMPORTER_WORK.get(importer) if importer else NATIVE_WORK.get(str(getattr(cls, "name", "") or name)))
        or ("agentic" if tools else "control")
    )
    if work not in WORK_KINDS:
        work = "agentic" if tools else "control"  # a declaration the catalog does not know: by its shape
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
        work=work,
        baselines=str(meta.get("baselines_url", "") or ""),
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
