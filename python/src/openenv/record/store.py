"""Record files: JSONL (``*.jsonl``) or Parquet (``*.parquet``), written an episode at a time.

What you may rely on:

* A file only ever holds whole episodes once a run ends or is interrupted between two
  flushes: JSONL appends each finished episode in one write; Parquet is rewritten (to a
  temporary file, then renamed over the old one) at every flush.
* :meth:`RecordStore.open` on an existing file keeps its finished episodes (a row with
  ``final``) and drops the rows of any unfinished one, so a resumed run redoes it. A file
  written before typed columns is rewritten typed then (its values unchanged).
* :func:`load` reads either format back as a ``datasets.Dataset`` with typed columns (nested
  types; :mod:`openenv.record.rows`); :func:`read_rows` as plain dicts, as stored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from openenv.record.rows import COLUMNS, SCHEMA, table, typed_row

__all__ = ["RecordStore", "load", "read_rows"]


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ValueError(f"{path}: record files end in .jsonl or .parquet")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a record file, in file order, as dicts of its columns as stored (typed
    values, or JSON text in the columns ``json_columns`` names and in files written before
    typed columns: :func:`openenv.record.decode_row` parses either)."""
    p = Path(path)
    if not p.exists():
        return []
    if _kind(p) == "jsonl":
        rows = []
        with p.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by a crash mid-write: that episode is unfinished
                    break
        return [{name: r.get(name) for name in (COLUMNS if "json_columns" in r else SCHEMA.names)} for r in rows]
    names = pq.read_schema(p).names
    t: pa.Table = pq.read_table(p) if "json_columns" in names else pq.read_table(p, schema=SCHEMA)
    out: list[dict[str, Any]] = t.to_pylist()
    return out


def load(path: str | Path) -> Any:
    """A record file as a ``datasets.Dataset``: observation, action, reward breakdown and
    metadata as typed (nested) columns, whichever format and vintage the file has."""
    import datasets

    p = Path(path)
    if _kind(p) == "parquet" and "json_columns" in pq.read_schema(p).names:
        return datasets.Dataset.from_parquet(str(p))
    return datasets.Dataset(table([typed_row(r) for r in read_rows(p)]))


class RecordStore:
    """Appends finished episodes to a record file; knows which episodes it already holds."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.kind = _kind(self.path)
        self._rows: list[dict[str, Any]] = []  # parquet: everything, rewritten at flush
        self._pending: list[dict[str, Any]] = []
        self.finished: set[str] = set()

    def open(self) -> RecordStore:
        """Read what the file holds; keep the finished episodes only."""
        stored = read_rows(self.path)
        old = bool(stored) and "json_columns" not in stored[0]
        rows = [typed_row(r) for r in stored]
        self.finished = {r["episode_id"] for r in rows if r.get("final")}
        kept = [r for r in rows if r["episode_id"] in self.finished]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.kind == "parquet":
            self._rows = kept
            if len(kept) != len(rows) or old or not self.path.exists():
                self._write_parquet()
        elif len(kept) != len(rows) or old or not self.path.exists():
            tmp = self.path.with_name(self.path.name + ".tmp")
            with tmp.open("w", encoding="utf-8") as f:
                f.writelines(_line(r) for r in kept)
            os.replace(tmp, self.path)
        return self

    def add_episode(self, rows: Sequence[dict[str, Any]]) -> None:
        """Queue one finished episode (written by the next :meth:`flush`); its rows may hold
        JSON text (:class:`openenv.record.recorder.EpisodeLog`) or values."""
        self._pending.extend(typed_row(r) for r in rows)
        self.finished.update(r["episode_id"] for r in rows)

    def flush(self) -> None:
        if not self._pending:
            return
        if self.kind == "jsonl":
            text = "".join(_line(r) for r in self._pending)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        else:
            self._rows.extend(self._pending)
            self._write_parquet()
        self._pending.clear()

    def _write_parquet(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(table(self._rows), tmp)
        os.replace(tmp, self.path)


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, allow_nan=True) + "\n"
