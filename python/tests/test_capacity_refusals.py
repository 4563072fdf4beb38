"""Capacity refusals over gRPC reach the stock grpcio client as RESOURCE_EXHAUSTED, whatever
the burst (docs/security.md, "Streams beyond capacity").

The issue: 5,000 ``Session`` streams on 10 connections against a full server; besides the
in-band RESOURCE_EXHAUSTED refusals, a fifth ended with RST_STREAM REFUSED_STREAM (UNAVAILABLE)
and some read as INTERNAL. gRPC counted streams that had ended but whose call the server had not
released yet against each connection's stream limit, and refused new ones while over it; the
client, which counts open streams as HTTP/2 does, had already sent them. The same, smaller: a
server with 8 session slots (128 streams per connection), all taken, and 200 streams on each of
3 connections. Every stream beyond capacity must end with RESOURCE_EXHAUSTED (in band, or as the
status), none otherwise, and the server then serves a new session. Real servers in subprocesses,
real sockets; no timing is asserted (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from openenv_testkit import TESTS_DIR

from openenv.errors import ErrorCode
from openenv.v1 import environment_pb2, environment_pb2_grpc

pytestmark = pytest.mark.anyio

SLOTS = 8  # the server's capacity: 128 streams per connection (the floor of max_sessions + 16)
CHANNELS = 3
PER_CHANNEL = 200  # beyond a connection's stream limit: the client queues the rest, as HTTP/2 says
WAIT_S = 60.0  # bound of every wait (never a timing assertion)


@contextlib.contextmanager
def serving(tmp_path: Path, engine: str) -> Iterator[str]:
    """``openenv serve`` of a counter with ``SLOTS`` sessions, gRPC only: host:port."""
    ready = tmp_path / f"ready-{engine}"
    cmd = [sys.executable, "-m", "openenv.cli", "serve", "openenv_testenvs:Counter", "--port", "0", "--no-http"]
    cmd += ["--max-sessions", str(SLOTS), "--engine", engine, "--ready-file", str(ready)]
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(TESTS_DIR)) if p)
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": path}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT_S
        while not ready.exists():
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                pytest.fail(f"the server exited with {proc.returncode}: {err[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the server did not start")
            time.sleep(0.02)
        yield ready.read_text().strip().removeprefix("grpc://")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _handshake() -> environment_pb2.SessionRequest:
    return environment_pb2.SessionRequest(
        request_id=1, handshake=environment_pb2.HandshakeRequest(protocol_version="1.0")
    )


async def _open(stub: Any) -> tuple[str, Any]:
    """Open a session as the stock client does: (how it went, the call)."""
    call = stub.Session()
    try:
        await asyncio.wait_for(call.write(_handshake()), WAIT_S)
        resp = await asyncio.wait_for(call.read(), WAIT_S)
    except grpc.aio.AioRpcError as e:
        return f"status {e.code().name}: {(e.details() or '')[:80]}", call
    if resp is grpc.aio.EOF:
        return f"status {(await call.code()).name}", call
    kind = resp.WhichOneof("kind")
    if kind == "error":
        return f"in band {ErrorCode(resp.error.code).name}{' (fatal)' if resp.error.fatal else ''}", call
    return kind or "nothing", call


async def _end(call: Any) -> str:
    """End a stream politely (half-close, read to its end): its status."""
    with contextlib.suppress(grpc.aio.AioRpcError):
        await asyncio.wait_for(call.done_writing(), WAIT_S)
    try:
        while await asyncio.wait_for(call.read(), WAIT_S) is not grpc.aio.EOF:
            pass
    except grpc.aio.AioRpcError as e:
        return e.code().name
    return (await call.code()).name  # type: ignore[no-any-return]


async def _refused(stub: Any) -> str:
    """One stream beyond capacity: how it ended."""
    how, call = await _open(stub)
    status = await _end(call)
    return how if how.startswith("status") else f"{how}, then {status}"


@pytest.mark.parametrize("engine", ["grpcio", "grpclib"])
async def test_streams_beyond_capacity_all_end_with_resource_exhausted(tmp_path: Path, engine: str) -> None:
    """600 handshakes on 3 connections against a full server: each ends with RESOURCE_EXHAUSTED
    (fatal, in band), never UNAVAILABLE (RST_STREAM REFUSED_STREAM) nor INTERNAL; then the
    server serves a new session in a freed slot."""
    with serving(tmp_path, engine) as addr:
        holder = grpc.aio.insecure_channel(addr)
        stub = environment_pb2_grpc.EnvironmentServiceStub(holder)
        held = []
        channels = [grpc.aio.insecure_channel(addr, options=[("grpc.channel_id", i)]) for i in range(CHANNELS)]
        try:
            for _ in range(SLOTS):
                how, call = await _open(stub)
                held.append(call)
                assert how == "handshake", how
            how, call = await _open(stub)  # the server is full
            assert how == "in band RESOURCE_EXHAUSTED (fatal)", how
            assert await _end(call) == "OK"

            stubs = [environment_pb2_grpc.EnvironmentServiceStub(c) for c in channels]
            outcomes = await asyncio.gather(*(_refused(stubs[i % CHANNELS]) for i in range(CHANNELS * PER_CHANNEL)))
            tally = collections.Counter(outcomes)
            assert tally == {"in band RESOURCE_EXHAUSTED (fatal), then OK": CHANNELS * PER_CHANNEL}, tally

            # A freed slot serves a new session: capacity was refused, not the server.
            first = held.pop()
            await first.write(environment_pb2.SessionRequest(request_id=2, close=environment_pb2.CloseRequest()))
            assert (await asyncio.wait_for(first.read(), WAIT_S)).WhichOneof("kind") == "close"
            assert await _end(first) == "OK"
            deadline = time.monotonic() + WAIT_S
            while True:  # the slot is freed just after the close is answered
                how, call = await _open(stub)
                if how == "handshake":
                    held.append(call)
                    break
                assert how == "in band RESOURCE_EXHAUSTED (fatal)", how
                assert await _end(call) == "OK"
                assert time.monotonic() < deadline, "no slot was freed"
                await asyncio.sleep(0.05)
        finally:
            for call in held:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await call.write(environment_pb2.SessionRequest(request_id=3, close=environment_pb2.CloseRequest()))
                await _end(call)
            for c in (holder, *channels):
                await c.close()
