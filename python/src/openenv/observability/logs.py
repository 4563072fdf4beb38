"""Structured logs: one line per session event and per request, as text or JSON.

The ``openenv.access`` logger writes, at INFO, one record per request with the fields
``transport``, ``session_id``, ``episode_id``, ``request_id``, ``kind``, ``status`` and
``duration_ms`` (and ``env_ms`` when known), and one record when a session opens or
closes. ``openenv -v serve ... --log-format json`` (or :func:`configure_logging`) prints
them as one JSON object per line, with these fields at the top level, for log shippers.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any

import orjson

__all__ = ["ACCESS_LOGGER", "FIELDS", "JsonFormatter", "TextFormatter", "configure_logging"]

ACCESS_LOGGER = "openenv.access"

FIELDS = (
    "event",
    "transport",
    "session_id",
    "episode_id",
    "request_id",
    "kind",
    "status",
    "duration_ms",
    "env_ms",
    "client_name",
    "reward",
    "trace_id",
)
"""The structured fields a record may carry (``extra=`` of the logging call)."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k in FIELDS if (v := record.__dict__.get(k)) is not None and v != ""}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, the structured fields, and ``exc_info`` text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """The usual text line, followed by the structured fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = _fields(record)
        if extra and record.name == ACCESS_LOGGER:
            return line  # the access message already lists them
        if extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return line


def configure_logging(level: int = logging.INFO, fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` (``text`` or ``json``), replacing the root
    logger's handlers (what the ``openenv`` command does with ``-v`` and ``--log-format``)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
