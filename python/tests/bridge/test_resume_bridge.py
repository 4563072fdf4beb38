"""``openenv bridge`` in front of a gRPC server survives a dropped upstream connection (RFC
0006): the bridge's session stream is resumable, so a WebSocket client never notices a reset
of the bridge-to-server connection, and no step is lost or applied twice."""

from __future__ import annotations

import asyncio

import pytest
from tcp_proxy import TcpProxy  # python/tests (on sys.path: python/tests/conftest.py)
from test_resume import WAIT, Gated

import openenv
import openenv.bridge as bridge
import openenv.http as http_side

pytestmark = [pytest.mark.anyio, pytest.mark.timing]


async def test_a_websocket_client_rides_out_a_reset_of_the_bridges_upstream_connection() -> None:
    Gated.applied, Gated.block_at = 0, 3
    Gated.entered, Gated.gate = asyncio.Event(), asyncio.Event()
    srv = openenv.Server(Gated, "127.0.0.1", 0)
    await srv.start()
    try:
        async with TcpProxy(srv.port or 0) as proxy:
            backend = await bridge.RemoteBackend.connect(f"grpc://127.0.0.1:{proxy.port}")
            http = http_side.HttpServer(http_side.BridgeApp(backend), "127.0.0.1", 0)
            await http.start()
            try:
                async with openenv.EnvClient(http.url) as env:  # OpenEnv's JSON frames on /ws
                    await env.reset(seed=2)
                    steps = [asyncio.ensure_future(env.step(d)) for d in range(1, 7)]
                    await asyncio.wait_for(Gated.entered.wait(), WAIT)  # step 3 is in the environment
                    assert proxy.drop() >= 1
                    Gated.gate.set()
                    results = await asyncio.wait_for(asyncio.gather(*steps), WAIT)
                    assert [r.step_count for r in results] == [1, 2, 3, 4, 5, 6]
                    assert [r.observation["total"] for r in results] == [1, 3, 6, 10, 15, 21]
                    assert Gated.applied == 6
                    assert proxy.accepted >= 2  # the bridge reconnected
            finally:
                await http.stop()
                await backend.stop()
    finally:
        await srv.stop(1.0)
