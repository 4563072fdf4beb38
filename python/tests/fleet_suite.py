"""The fleet test suite every provider passes (local processes, Docker containers): placement
by live load, vectorised calls across servers, a killed server failing only its own sessions,
and a replacement rejoining. Imported by the provider test modules."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

import pytest
from openenv_testkit import wait_until

import openenv
from openenv.client.load import fetch_load
from openenv.client.urls import parse_url
from openenv.errors import Unavailable
from openenv.fleet import FleetClient, Provider

ECHO = openenv.CallToolAction("echo_message", {"message": "hi"})
WAIT_S = 60.0  # servers are processes or containers on a loaded machine: generous bounds


def per_server(fleet: FleetClient) -> collections.Counter[str]:
    return collections.Counter(fleet.server_of(s) for s in fleet.sessions)


async def run_fleet_suite(provider: Provider, kill: Callable[[str], None], per_server_sessions: int = 12) -> None:
    """``provider`` runs 2 servers already (``up(2)``); ``kill(name)`` kills one without drain."""
    endpoints = provider.endpoints()
    assert len(endpoints) == 2
    async with FleetClient(provider, client_cls=openenv.ToolEnvClient, refresh_s=0.2) as fleet:
        # 1. Placement spreads a burst evenly, and GetLoad on each server agrees.
        sessions = await fleet.open_many(2 * per_server_sessions)
        counts = per_server(fleet)
        assert sorted(counts.values()) == [per_server_sessions, per_server_sessions], counts
        for ep in endpoints:
            # A docker fleet's containers each require their own token (RFC 0003): the endpoint has it.
            load = await asyncio.to_thread(fetch_load, parse_url(ep.url)[1], token=ep.token or None)
            assert load.sessions_open == per_server_sessions and not load.draining

        # 2. Vectorised calls over sessions of both servers.
        batch = await fleet.reset_batch(seeds=[5])
        assert batch.env_ids == list(range(len(sessions))) and not batch.errors
        batch = await fleet.step_batch([ECHO] * len(sessions))
        assert not batch.errors and all(r.reward is not None and r.reward > 0 for r in batch.results)
        episodes = {i: r.episode_id for i, r in zip(batch.env_ids, batch.results, strict=True)}

        # 3. Kill one server: only its sessions fail, each naming its episode.
        victim = endpoints[0]
        kill(victim.name)
        batch = await fleet.step_batch([ECHO] * len(sessions))
        lost = {i for i, s in enumerate(fleet.sessions) if fleet.server_of(s) == victim.url}
        assert set(batch.errors) == lost and len(lost) == per_server_sessions
        assert set(batch.env_ids) == set(range(len(sessions))) - lost
        for i, err in batch.errors.items():
            assert isinstance(err, Unavailable) and err.fatal, repr(err)
            assert episodes[i] in err.message and err.details["episode_id"] == episodes[i]

        # 4. New sessions go to the survivor while the victim is gone.
        for s in [fleet.sessions[i] for i in sorted(lost, reverse=True)]:
            await s.close()
        fresh = await fleet.open_many(4)
        assert {fleet.server_of(s) for s in fresh} == {endpoints[1].url}

        # 5. A replacement rejoins and, being the emptiest, takes the next sessions.
        healed = await asyncio.to_thread(provider.heal)
        assert len(healed) == 2
        (newcomer,) = [ep for ep in healed if ep.url != endpoints[1].url]
        await wait_until(lambda: newcomer.url in fleet.servers and fleet.servers[newcomer.url].up, WAIT_S, "rejoin")
        more = await fleet.open_many(4)
        assert {fleet.server_of(s) for s in more} == {newcomer.url}
        await more[0].reset()
        r = await more[0].step(ECHO)
        assert r.reward is not None


def require(cond: bool, why: str) -> None:
    if not cond:
        pytest.skip(why)
