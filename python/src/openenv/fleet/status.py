"""What ``openenv fleet status`` shows: each server's health and live load."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os

from openenv.client.health import check_health
from openenv.client.load import fetch_load, load_score
from openenv.client.urls import parse_url
from openenv.errors import EnvError
from openenv.fleet.provider import Endpoint
from openenv.security import TOKEN_ENV
from openenv.v1 import load_pb2

__all__ = ["ServerStatus", "fleet_status", "format_table"]


@dataclasses.dataclass
class ServerStatus:
    """One server's health (gRPC health status name) and load (None when unreadable)."""

    endpoint: Endpoint
    health: str
    load: load_pb2.ServerLoad | None
    error: str = ""


def _one(ep: Endpoint, timeout: float) -> ServerStatus:
    target = parse_url(ep.url)[1]
    health = check_health(target, "", timeout)
    if health != "SERVING":
        return ServerStatus(ep, health, None)
    try:
        return ServerStatus(ep, health, fetch_load(target, timeout, token=ep.token or os.environ.get(TOKEN_ENV)))
    except EnvError as e:
        return ServerStatus(ep, health, None, e.message)


def fleet_status(endpoints: list[Endpoint], timeout: float = 5.0) -> list[ServerStatus]:
    """Health and load of every endpoint, asked in parallel, in the endpoints' order."""
    if not endpoints:
        return []
    with concurrent.futures.ThreadPoolExecutor(min(16, len(endpoints))) as pool:
        return list(pool.map(lambda ep: _one(ep, timeout), endpoints))


def format_table(rows: list[ServerStatus]) -> str:
    """A plain-text table: server, url, where, sessions, load, p50 step, health."""
    header = ("SERVER", "URL", "WHERE", "SESSIONS", "LOAD", "STEP P50", "HEALTH")
    lines = [header]
    for r in rows:
        if r.load is not None:
            ld = r.load
            sessions = f"{ld.sessions_open}/{ld.max_sessions}"
            load = f"{100 * load_score(ld):.0f}%" + (" draining" if ld.draining else "")
            p50 = f"{ld.step_latency_p50.ToNanoseconds() / 1e6:.2f} ms"
        else:
            sessions, load, p50 = "-", "-", "-"
        lines.append((r.endpoint.name, r.endpoint.url, r.endpoint.where, sessions, load, p50, r.health))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines)
