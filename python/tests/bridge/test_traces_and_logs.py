"""Operators' view of a server: OpenTelemetry spans that join the client's trace (W3C trace
context in the gRPC metadata or the WebSocket upgrade), and structured access logs (one JSON
object per line with ``--log-format json``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bridge_kit import HERE, env_with_path, served, stop, wait_file

import openenv
from gridworld import Action, Move

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from openenv_testenvs import Counter

trace = pytest.importorskip("opentelemetry.trace")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Spans of this process, in memory (the SDK's exporter for tests)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the global provider can be set once per process
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exp = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    try:
        yield exp
    finally:
        exp.shutdown()  # stores nothing from later tests


@pytest.mark.anyio
async def test_server_step_spans_share_the_trace_of_the_client_span(exporter: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("a-trainer")
    async with served(Counter) as host:
        assert host.address is not None and host.http_url is not None
        with tracer.start_as_current_span("rollout") as rollout:
            async with openenv.EnvClient(host.address) as grpc_env:
                first = await grpc_env.reset(seed=1)
                await grpc_env.step({"delta": 2})
            async with openenv.EnvClient(host.http_url) as ws_env:
                await ws_env.reset()
                await ws_env.step({"delta": 3})
        async with openenv.EnvClient(host.address) as untraced:  # outside any span: its own traces
            await untraced.reset()
            await untraced.step({"delta": 4})
    ctx = rollout.get_span_context()
    steps = [s for s in exporter.get_finished_spans() if s.name == "openenv.step"]
    assert len(steps) == 3
    joined = [s for s in steps if s.context.trace_id == ctx.trace_id]
    assert sorted(s.attributes["openenv.transport"] for s in joined) == ["grpc", "websocket"]
    for s in joined:
        assert s.parent is not None and s.parent.span_id == ctx.span_id
        assert s.kind == trace.SpanKind.SERVER
        assert s.attributes["openenv.status"] == "OK"
        assert s.attributes["openenv.session_id"]
        assert s.attributes["openenv.episode_id"]
        assert s.attributes["openenv.env_s"] >= 0
    grpc_step = next(s for s in joined if s.attributes["openenv.transport"] == "grpc")
    assert grpc_step.attributes["openenv.episode_id"] == first.episode_id
    (alone,) = [s for s in steps if s.context.trace_id != ctx.trace_id]
    assert alone.parent is None


@pytest.mark.anyio
async def test_a_failed_request_is_an_error_span(exporter: InMemorySpanExporter) -> None:
    async with served(Counter) as host:
        assert host.address is not None
        async with openenv.EnvClient(host.address) as env:
            await env.reset()
            with pytest.raises(openenv.InvalidArgument):
                await env.step({"delta": 5000})
    (failed,) = [s for s in exporter.get_finished_spans() if s.name == "openenv.step"]
    assert failed.attributes["openenv.status"] == "INVALID_ARGUMENT"
    assert failed.status.status_code == trace.StatusCode.ERROR


def _records(stderr: str) -> list[dict[str, Any]]:
    out = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))  # every structured line is one JSON object
    return out


def test_json_logs_have_a_line_per_session_and_per_request(tmp_path: Path) -> None:
    """``openenv -v --log-format json serve``: the session's lines carry its ids, in order."""
    ready = tmp_path / "grpc"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openenv.cli",
            "-v",
            "--log-format",
            "json",
            "serve",
            "gridworld.server:GridWorldEnvironment",
            "--port",
            "0",
            "--no-http",
            "--ready-file",
            str(ready),
        ],
        env=env_with_path(HERE),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        address = wait_file(ready, proc)
        with openenv.EnvClient(address).sync() as env:
            session_id = env.client.session_id
            r = env.reset(seed=3)
            env.step(Action(move=Move.MOVE_UP))
    finally:
        stop(proc)
    assert proc.stderr is not None
    records = _records(proc.stderr.read())
    mine = [r for r in records if r.get("session_id") == session_id]
    events = [(r["event"], r.get("kind")) for r in mine]
    assert events == [
        ("session_open", None),
        ("request", "handshake"),
        ("request", "reset"),
        ("request", "step"),
        ("request", "close"),
        ("session_close", None),
    ]
    step = next(r for r in mine if r.get("kind") == "step")
    assert step["logger"] == "openenv.access" and step["level"] == "INFO"
    assert step["transport"] == "grpc"
    assert step["episode_id"] == r.episode_id
    assert step["status"] == "OK"
    assert isinstance(step["request_id"], int)
    assert 0 <= step["env_ms"] <= step["duration_ms"]
    assert step["ts"].endswith("+00:00")
