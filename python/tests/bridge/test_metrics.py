"""``/metrics``: after a scripted workload over gRPC, WebSocket and MCP, the Prometheus
exposition shows exactly the requests, handshakes, episodes and bytes of that workload, and
latencies within bounds (docs/observability.md lists the names)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from bridge_kit import Ws, served, ws_url
from prometheus_client.parser import text_string_to_metric_families

import openenv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from openenv_testenvs import Counter, ToolEnv

pytestmark = pytest.mark.anyio
WAIT_S = 60.0


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``url``/metrics as ``(name, sorted labels) -> value``."""
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        r = await http.get(url + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def wait_for_value(url: str, name: str, want: float, **labels: str) -> dict[Any, float]:
    """Scrape until ``name{labels}`` equals ``want`` (a session's close completes after its reply)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        samples = await scrape(url)
        if value(samples, name, **labels) == want:
            return samples
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{name}{labels} is {value(samples, name, **labels)}, want {want}")
        await asyncio.sleep(0.05)


async def test_metrics_count_a_scripted_workload_exactly_on_every_transport() -> None:
    async with served(Counter, max_sessions=1) as host:
        url = host.http_url
        assert url is not None and host.address is not None
        # gRPC: one episode of return 6 in 3 steps, a new episode, a refused action.
        async with openenv.EnvClient(host.address) as env:
            await env.reset(seed=0)
            for delta in (1, 2):
                await env.step({"delta": delta})
            await env.step({"delta": 3, "finish": "terminated"})
            await env.reset()
            with pytest.raises(openenv.InvalidArgument):
                await env.step({"delta": 2000})
        await wait_for_value(url, "openenv_sessions_open", 0, transport="grpc")
        # WebSocket: one truncated episode of return 4, a state, a bad frame; meanwhile the
        # only slot is taken, so a gRPC session is refused.
        sent = [
            json.dumps({"type": "reset", "data": {"seed": 5}}),
            json.dumps({"type": "step", "data": {"delta": 4, "finish": "truncated"}}),
            json.dumps({"type": "state"}),
            "{not json",
        ]
        async with Ws(ws_url(url)) as ws:
            replies = [await ws.ask(f) for f in sent]
            assert [r["type"] for r in replies] == ["observation", "observation", "state", "error"]
            with pytest.raises(openenv.ResourceExhausted):
                async with openenv.EnvClient(host.address):
                    pass
            await ws.send({"type": "close"})
            sent.append(json.dumps({"type": "close"}))
        samples = await wait_for_value(url, "openenv_sessions_open", 0, transport="websocket")
        async with httpx.AsyncClient(timeout=WAIT_S) as http:
            assert (await http.get(url + "/health")).status_code == 200
        samples = await scrape(url)

    def requests(transport: str, kind: str, code: str = "OK") -> float:
        return value(samples, "openenv_requests_total", transport=transport, kind=kind, code=code)

    assert value(samples, "openenv_sessions_max") == 1
    assert value(samples, "openenv_handshakes_total", transport="grpc", outcome="OK") == 1
    assert value(samples, "openenv_handshakes_total", transport="grpc", outcome="RESOURCE_EXHAUSTED") == 1
    assert value(samples, "openenv_handshakes_total", transport="websocket", outcome="OK") == 1
    assert value(samples, "openenv_sessions_opened_total", transport="grpc") == 1
    assert value(samples, "openenv_sessions_opened_total", transport="websocket") == 1
    assert requests("grpc", "handshake") == 1
    assert requests("grpc", "handshake", "RESOURCE_EXHAUSTED") == 1
    assert requests("grpc", "reset") == 2
    assert requests("grpc", "step") == 3
    assert requests("grpc", "step", "INVALID_ARGUMENT") == 1
    assert requests("grpc", "close") == 1
    assert requests("websocket", "reset") == 1
    assert requests("websocket", "step") == 1
    assert requests("websocket", "state") == 1
    assert requests("websocket", "invalid", "INVALID_ARGUMENT") == 1  # INVALID_JSON on the wire
    assert requests("websocket", "close") == 1
    # Episodes: the return is the sum of the rewards (the deltas), the length its steps.
    assert value(samples, "openenv_episodes_total", transport="grpc", outcome="terminated") == 1
    assert value(samples, "openenv_episode_return_count", transport="grpc") == 1
    assert value(samples, "openenv_episode_return_sum", transport="grpc") == 6
    assert value(samples, "openenv_episode_length_steps_sum", transport="grpc") == 3
    assert value(samples, "openenv_episodes_total", transport="websocket", outcome="truncated") == 1
    assert value(samples, "openenv_episode_return_sum", transport="websocket") == 4
    # Latency: one observation per request; bounded by the workload's wall time, never by a guess.
    steps = value(samples, "openenv_request_duration_seconds_count", transport="grpc", kind="step")
    assert steps == 4
    total = value(samples, "openenv_request_duration_seconds_sum", transport="grpc", kind="step")
    env_s = value(samples, "openenv_env_call_duration_seconds_sum", transport="grpc", kind="step")
    overhead = value(samples, "openenv_protocol_overhead_seconds_sum", transport="grpc", kind="step")
    assert 0 < total < WAIT_S
    assert 0 < env_s <= total
    assert overhead == pytest.approx(total - env_s, abs=1e-6)
    inf = value(samples, "openenv_request_duration_seconds_bucket", transport="grpc", kind="step", le="+Inf")
    assert inf == 4
    # Bytes: what the test sent over the WebSocket, to the byte.
    assert value(samples, "openenv_received_bytes_total", transport="websocket") == sum(len(f) for f in sent)
    assert value(samples, "openenv_received_bytes_total", transport="grpc") > 0
    assert value(samples, "openenv_sent_bytes_total", transport="websocket") > 0
    assert value(samples, "openenv_http_requests_total", path="/health", method="GET", status="200") == 1


async def test_mcp_requests_are_counted_by_method_and_outcome() -> None:
    async with served(ToolEnv) as host:
        url = host.http_url
        assert url is not None
        async with httpx.AsyncClient(base_url=url, timeout=WAIT_S) as http:
            ok = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert "result" in ok.json()
            bad = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "no/such"})
            assert "error" in bad.json()
        samples = await scrape(url)
    assert value(samples, "openenv_requests_total", transport="mcp", kind="tools/list", code="OK") == 1
    assert value(samples, "openenv_requests_total", transport="mcp", kind="no/such", code="JSONRPC_ERROR") == 1
    assert value(samples, "openenv_http_requests_total", path="/mcp", method="POST", status="200") == 2


async def test_metrics_can_be_served_on_their_own_port_and_turned_off() -> None:
    async with served(Counter, metrics_port=0) as host:
        assert host.metrics_url is not None
        async with openenv.EnvClient(host.address) as env:
            await env.reset()
        own = await scrape(host.metrics_url.removesuffix("/metrics"))
        assert value(own, "openenv_requests_total", transport="grpc", kind="reset", code="OK") == 1
    async with served(Counter, metrics=False) as host, httpx.AsyncClient(timeout=WAIT_S) as http:
        assert (await http.get(f"{host.http_url}/metrics")).status_code == 404


async def test_vectorised_sessions_count_each_instance_episode() -> None:
    async with served(Counter) as host:
        assert host.address is not None and host.http_url is not None
        async with openenv.VectorEnvClient(host.address, num_envs=2) as envs:
            await envs.reset_batch(seeds=[0])
            await envs.step_batch([{"delta": 1}, {"delta": 2}])
            await envs.step_batch([{"delta": 3, "finish": "terminated"}, {"delta": 4, "finish": "truncated"}])
        samples = await wait_for_value(host.http_url, "openenv_sessions_open", 0, transport="grpc")
    assert value(samples, "openenv_requests_total", transport="grpc", kind="batch_step", code="OK") == 2
    assert value(samples, "openenv_requests_total", transport="grpc", kind="batch_reset", code="OK") == 1
    assert value(samples, "openenv_episodes_total", transport="grpc", outcome="terminated") == 1
    assert value(samples, "openenv_episodes_total", transport="grpc", outcome="truncated") == 1
    assert value(samples, "openenv_episode_return_sum", transport="grpc") == 1 + 3 + 2 + 4
    assert value(samples, "openenv_episode_length_steps_sum", transport="grpc") == 4


@pytest.mark.parametrize("engine", ["grpcio", "grpclib"])
async def test_metrics_count_each_request_of_a_pipelined_message(engine: str) -> None:
    """RFC 0009: requests coalesced into one message are counted one by one, as if sent alone."""
    async with served(Counter, grpc_library=engine) as host:
        url = host.http_url
        assert url is not None and host.address is not None
        async with openenv.EnvClient(host.address, grpc_engine=engine) as env:
            await env.reset(seed=0)
            deltas = [1] * 20 + [2000] + [1] * 11  # one refused in the middle
            results = await asyncio.wait_for(
                asyncio.gather(*(env.step({"delta": d}) for d in deltas), return_exceptions=True), WAIT_S
            )
            assert sum(isinstance(r, openenv.InvalidArgument) for r in results) == 1
        assert host.manager.load.pipelined_messages >= 1  # they did travel coalesced
        samples = await wait_for_value(url, "openenv_sessions_open", 0, transport="grpc")

    def requests(kind: str, code: str = "OK") -> float:
        return value(samples, "openenv_requests_total", transport="grpc", kind=kind, code=code)

    assert requests("step") == 31
    assert requests("step", "INVALID_ARGUMENT") == 1
    assert requests("pipelined") == 0  # the message itself is no request
    assert value(samples, "openenv_request_duration_seconds_count", transport="grpc", kind="step") == 32


async def test_metrics_show_the_process_memory_cpu_and_file_descriptors() -> None:
    async with served(Counter) as host:
        assert host.http_url is not None
        samples = await scrape(host.http_url)
    names = {name for name, _ in samples}
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "python_info"):
        assert name in names, name
    assert value(samples, "process_resident_memory_bytes") > 1_000_000  # a Python server holds megabytes
    assert value(samples, "process_open_fds") >= 3  # at least the listening sockets
    assert value(samples, "process_max_fds") >= value(samples, "process_open_fds")
