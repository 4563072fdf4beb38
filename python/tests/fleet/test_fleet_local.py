"""The ``local`` provider and placement: real ``openenv serve`` processes on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fleet_suite import ECHO, per_server, run_fleet_suite
from openenv_testenvs import Counter
from openenv_testkit import running, target

import openenv
from openenv.client.load import fetch_load, get_load
from openenv.errors import Unavailable
from openenv.fleet import FleetClient, LocalProvider
from openenv.security import TokenSet

pytestmark = pytest.mark.anyio

ECHO_TARGET = "echo_env:EchoEnvironment"


@pytest.fixture
def local_fleet(tmp_path: Path) -> Iterator[LocalProvider]:
    provider = LocalProvider(ECHO_TARGET, max_sessions=64, state_dir=str(tmp_path))
    try:
        provider.up(2)
        yield provider
    finally:
        provider.down(grace_s=5.0)


async def test_get_load_reports_sessions_capacity_and_step_latency() -> None:
    """GetLoad counts open sessions against capacity and measures steps, without a session."""
    async with running(Counter, max_sessions=5) as srv:
        load = await asyncio.to_thread(fetch_load, target(srv))
        assert (load.sessions_open, load.max_sessions, load.steps_total) == (0, 5, 0)
        async with openenv.EnvClient(srv.address) as a, openenv.EnvClient(srv.address) as b:
            assert a.info is not None and a.info.capabilities.load_reporting
            await a.reset()
            await b.reset()
            for _ in range(3):
                await a.step({"delta": 1})
            load = await asyncio.to_thread(fetch_load, target(srv))
            assert (load.sessions_open, load.steps_total, load.sessions_opened_total) == (2, 3, 2)
            assert load.step_latency_p99.ToNanoseconds() >= load.step_latency_p50.ToNanoseconds() > 0
            assert not load.draining and load.uptime.ToNanoseconds() > 0
        load = await asyncio.to_thread(fetch_load, target(srv))
        assert load.sessions_open == 0


async def test_placement_prefers_the_server_with_the_most_room() -> None:
    """Sessions other clients hold count: the fleet fills the emptier server first."""
    async with running(Counter, max_sessions=8) as busy, running(Counter, max_sessions=8) as idle:
        others = [openenv.EnvClient(busy.address) for _ in range(4)]
        for c in others:
            await c.connect()
        try:
            # No background polls (refresh_s): the test reads loads when it chooses to.
            async with FleetClient([busy.address, idle.address], refresh_s=3600) as fleet:
                await fleet.open_many(4)
                assert per_server(fleet) == {idle.address: 4}
                await fleet.refresh()  # the server's count now includes them: no change
                await fleet.open_many(4)  # now equal: 4 + 4 on each
                assert per_server(fleet) == {idle.address: 6, busy.address: 2}
                async with grpc.aio.insecure_channel(target(idle)) as ch:
                    assert (await get_load(ch)).sessions_open == 6
        finally:
            for c in others:
                await c.close()


async def test_a_full_fleet_refuses_with_unavailable_naming_each_server() -> None:
    async with running(Counter, max_sessions=2) as a, running(Counter, max_sessions=1) as b:
        async with FleetClient([a.address, b.address]) as fleet:
            await fleet.open_many(3)
            with pytest.raises(Unavailable, match="no server of the fleet can take a session"):
                await fleet.open()


async def test_local_fleet_passes_the_fleet_suite(local_fleet: LocalProvider) -> None:
    await run_fleet_suite(local_fleet, local_fleet.kill)


def test_cli_fleet_up_status_down(tmp_path: Path) -> None:
    """`openenv fleet up` starts detached servers and records them; `status` tables their
    load; `down` stops them."""
    env = {**os.environ, "OPENENV_FLEET_DIR": str(tmp_path)}
    cli = [sys.executable, "-m", "openenv.cli", "fleet"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], env=env, capture_output=True, text=True, timeout=120)

    up = run("up", ECHO_TARGET, "--provider", "local", "--replicas", "2", "--max-sessions", "16", "--name", "t")
    assert up.returncode == 0, up.stderr
    assert "server 2/2" in up.stdout + up.stderr
    state = json.loads((tmp_path / "t.json").read_text())
    urls = [s["url"] for s in state["servers"]]
    try:
        assert len(urls) == 2
        with FleetClient(urls, client_cls=openenv.ToolEnvClient).sync() as fleet:
            fleet.open_many(3)
            assert fleet.reset_batch().env_ids == [0, 1, 2]
            assert fleet.step_batch([ECHO] * 3).env_ids == [0, 1, 2]
            status = run("status", "t")
            assert status.returncode == 0, status.stderr
            lines = status.stdout.splitlines()
            assert lines[0].split()[:5] == ["SERVER", "URL", "WHERE", "SESSIONS", "LOAD"]
            sessions = sorted(line.split()[4] for line in lines[1:])
            assert sessions == ["1/16", "2/16"] and all("SERVING" in line for line in lines[1:])
            loads = [fetch_load(u.split("://")[1]) for u in urls]
            assert sorted(ld.sessions_open for ld in loads) == [1, 2]
    finally:
        down = run("down", "t")
    assert down.returncode == 0, down.stderr
    assert not (tmp_path / "t.json").exists()
    for s in state["servers"]:
        assert not Path(f"/proc/{s['pid']}").exists() or "zombie" in Path(f"/proc/{s['pid']}/status").read_text()


async def test_get_load_and_get_slash_load_need_the_token_of_a_server_that_requires_one() -> None:
    httpx = pytest.importorskip("httpx")
    token = "fleet-test-token"
    host = openenv.Host(Counter, port=0, http_port=0, tokens=TokenSet([token]))
    await host.start()
    try:
        assert host.address is not None and host.http_url is not None
        target = host.address.split("://")[1]
        with pytest.raises(openenv.Unauthenticated):
            await asyncio.to_thread(fetch_load, target)
        assert (await asyncio.to_thread(fetch_load, target, token=token)).sessions_open == 0
        async with httpx.AsyncClient(base_url=host.http_url, trust_env=False) as http:
            assert (await http.get("/load")).status_code == 401
            r = await http.get("/load", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200 and r.json()["sessions_open"] == 0
    finally:
        await host.stop(1.0)


async def test_the_http_side_reports_the_same_load_on_get_load() -> None:
    """GET /load is GetLoad's JSON twin over the same sessions (HTTP side of one Host)."""
    httpx = pytest.importorskip("httpx")
    host = openenv.Host(Counter, port=0, http_port=0, max_sessions=6)
    await host.start()
    try:
        assert host.address is not None and host.http_url is not None
        async with openenv.EnvClient(host.address) as env:
            await env.reset()
            await env.step({"delta": 2})
            async with httpx.AsyncClient(base_url=host.http_url, trust_env=False) as http:
                r = await http.get("/load")
                assert r.status_code == 200
                doc = r.json()
                assert (await http.post("/load", json={})).status_code == 405
            grpc_load = await asyncio.to_thread(fetch_load, host.address.split("://")[1])
        assert doc["sessions_open"] == grpc_load.sessions_open == 1
        assert doc["max_sessions"] == 6 and doc["steps_total"] == "1" and doc["draining"] is False  # uint64: a string
        assert doc["step_latency_p50"].endswith("s") and "uptime" in doc
    finally:
        await host.stop(1.0)


def test_cli_fleet_up_with_a_token_makes_every_server_require_it(tmp_path: Path) -> None:
    """`openenv fleet up --token-file F`: every local server requires the token (anonymous
    sessions refused UNAUTHENTICATED), the token is not written to the fleet's record, and
    `status` and clients use it from $OPENENV_TOKEN."""
    token = "fleet-token-for-tests"
    (tmp_path / "token").write_text(token + "\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENENV_TOKEN"} | {"OPENENV_FLEET_DIR": str(tmp_path)}
    cli = [sys.executable, "-m", "openenv.cli", "fleet"]

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], env=env | extra, capture_output=True, text=True, timeout=120)

    wrong = run("up", ECHO_TARGET, "--provider", "docker", "--token", token, "--name", "d")
    assert wrong.returncode != 0 and "each container gets its own token" in wrong.stderr
    up = run("up", ECHO_TARGET, "--replicas", "2", "--name", "t", "--token-file", str(tmp_path / "token"))
    assert up.returncode == 0, up.stderr
    record = (tmp_path / "t.json").read_text()
    assert token not in record
    urls = [s["url"] for s in json.loads(record)["servers"]]
    try:
        with pytest.raises(openenv.Unauthenticated):
            with openenv.ToolEnvClient(urls[0], token="").sync():
                pass
        with FleetClient(urls, client_cls=openenv.ToolEnvClient, token=token).sync() as fleet:
            fleet.open_many(2)
            assert not fleet.reset_batch().errors and not fleet.step_batch([ECHO] * 2).errors
            anonymous = run("status", "t").stdout.splitlines()[1:]
            assert all(line.split()[4] == "-" for line in anonymous)  # no load without the token
            lines = run("status", "t", OPENENV_TOKEN=token).stdout.splitlines()[1:]
            assert [line.split()[4].split("/")[0] for line in lines] == ["1", "1"], lines
    finally:
        down = run("down", "t")
    assert down.returncode == 0, down.stderr
