"""A server starved of its event loop or of CPU serves what arrived meanwhile (issue 34).

A connect burst of 16,384 sessions saturates a server: its deadlines must measure the peer,
not the server's own backlog. Each test starves a real server process on purpose and
deterministically, with no asserted durations:

* gRPC: a session's step blocks the server's event loop (``openenv_starved_envs.LoopBlocker``)
  while new streams arrive; gRPC accepts them but this process cannot pick them up. gRPC
  cancels a call left unpicked for 30 s (CANCELLED, no details: half of a 16k burst); the
  server lifts that bound, so the streams are served once the loop is back.
* WebSocket upgrades (uvicorn's ``/ws`` and the binary listener): the server's event loop is
  blocked while it reads its sockets (as a connect burst keeps it reading), after it accepted
  connections and for several times their request-head deadline, while the clients send their
  upgrade requests; uvloop then runs its due timers before it polls the sockets again, so the
  deadline used to close every one of them unread. They are answered now; a half-sent head
  in the same window is still cut by the deadline (the slowloris guard stays).

Cost: about 45 s of one mostly idle server (the gRPC case must outwait gRPC's 30 s), and about
10 s per listener.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from openenv_testkit import TESTS_DIR, WAIT_S, wait_until

import openenv
from openenv.client.grpc import GrpcConnection
from openenv.server import UNREQUESTED_S

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OPENENV_CLI = str(Path(sys.executable).parent / "openenv")
START_S = WAIT_S * 6  # hang guard: an interpreter starts on a loaded machine
GRPC_UNREQUESTED_DEFAULT_S = 30.0  # gRPC's grpc.server_max_unrequested_time_in_server
OUTWAIT_S = GRPC_UNREQUESTED_DEFAULT_S + 10.0  # how long the new streams wait for the blocked loop
HEAD_S = 1.0  # the request-head deadline of the WebSocket cases
BLOCKED_S = 4 * HEAD_S  # how long the loop is blocked while the upgrade requests arrive


@contextlib.asynccontextmanager
async def blocker_server(tmp_path: Path) -> AsyncIterator[str]:
    """``openenv serve openenv_starved_envs:LoopBlocker`` (gRPC only); yields its URL."""
    ready = tmp_path / "ready"
    log = (tmp_path / "stderr").open("wb")
    proc = await asyncio.create_subprocess_exec(
        OPENENV_CLI, "serve", "openenv_starved_envs:LoopBlocker", "--port", "0", "--no-http",
        "--ready-file", str(ready), cwd=str(TESTS_DIR), stderr=log,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR"},
    )  # fmt: skip
    try:
        await wait_until(lambda: ready.exists() or proc.returncode is not None, START_S, "ready")
        assert proc.returncode is None, (tmp_path / "stderr").read_text()
        yield ready.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()


async def test_streams_the_blocked_server_could_not_pick_up_for_longer_than_grpcs_default_are_served(
    tmp_path: Path,
) -> None:
    assert UNREQUESTED_S > OUTWAIT_S
    async with blocker_server(tmp_path) as url:
        target = url.removeprefix("grpc://")
        channel = grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        clients: list[openenv.EnvClient] = []
        try:
            blocker = openenv.EnvClient(url, connection=GrpcConnection(target, url=url, channel=channel))
            clients.append(blocker)
            await blocker.connect()
            await blocker.reset()
            mark, release = tmp_path / "mark", tmp_path / "release"
            blocked = asyncio.ensure_future(blocker.step({"mark": str(mark), "release": str(release)}))
            await wait_until(mark.exists, START_S, "the server's loop blocked")
            # From here the server's loop is blocked: gRPC takes these streams in, this
            # process cannot pick them up (nor answer their handshakes).
            late = [
                openenv.EnvClient(
                    url, connection=GrpcConnection(target, url=url, channel=channel), connect_timeout=10 * OUTWAIT_S
                )
                for _ in range(4)
            ]
            clients += late
            connects = [asyncio.ensure_future(c.connect()) for c in late]
            await asyncio.sleep(OUTWAIT_S)  # a wait for gRPC's bound to pass, not a measurement
            assert not any(c.done() for c in connects), [c.exception() for c in connects if c.done()]
            release.write_text("")
            await asyncio.gather(*connects)  # served: not CANCELLED by gRPC
            assert (await blocked).observation == 1
            totals = await asyncio.gather(*(c.reset() for c in late))
            assert [t.observation for t in totals] == [0] * len(late)
        finally:
            for c in clients:
                with contextlib.suppress(Exception):
                    await c.close()
            await channel.close()


# ---------------------------------------------------------------------------- WebSocket upgrades


@contextlib.contextmanager
def head_deadline_server(tmp_path: Path) -> Iterator[tuple[int, dict[str, int]]]:
    """``Counter`` with a ``HEAD_S`` request-head deadline, HTTP and binary listeners and a
    loop blocker (``openenv_starved_envs``), in a process of its own; yields (pid, ports)."""
    ports = tmp_path / "ports.json"
    log = (tmp_path / "stderr").open("wb")
    argv = [sys.executable, "openenv_starved_envs.py", str(ports), str(HEAD_S), *map(str, marks(tmp_path))]
    proc = subprocess.Popen(argv, cwd=str(TESTS_DIR), stderr=log)
    try:
        until = time.monotonic() + START_S
        while not ports.exists():
            assert proc.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < until, "the server did not start"
            time.sleep(0.05)
        yield proc.pid, json.loads(ports.read_text())
    finally:
        marks(tmp_path)[1].write_text("")  # never leave the loop blocked
        proc.kill()
        proc.wait()
        log.close()


def marks(tmp_path: Path) -> tuple[Path, Path]:
    """The blocker's files: written once the loop is blocked; the loop's release."""
    return tmp_path / "blocked", tmp_path / "release"


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def upgrade_request(port: int, path: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: openenv.v1+proto\r\n\r\n"
    ).encode()


def answer_head(s: socket.socket) -> bytes:
    """The first line the server answers with (b"" when it closed the connection)."""
    s.settimeout(WAIT_S * 3)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0]


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts a process's sockets in /proc")
@pytest.mark.parametrize(("listener", "path"), [("http", "/ws"), ("binary", "/v1/session")])
def test_upgrades_that_arrived_while_the_loop_was_blocked_past_the_head_deadline_are_answered(
    tmp_path: Path, listener: str, path: str
) -> None:
    n = 8
    blocked, release = marks(tmp_path)
    with head_deadline_server(tmp_path) as (pid, ports):
        port = ports[listener]
        before = open_fds(pid)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) for _ in range(n + 1)]
        blocker = socket.create_connection(("127.0.0.1", ports["blocker"]), timeout=WAIT_S)
        try:
            until = time.monotonic() + START_S
            while open_fds(pid) < before + n + 2:  # accepted: each connection's deadline is running
                assert time.monotonic() < until, "the server did not accept the connections"
                time.sleep(0.05)
            time.sleep(0.5)  # the loop runs connection_made after accepting
            blocker.sendall(b"block")
            while not blocked.exists():
                assert time.monotonic() < until + START_S, "the loop was not blocked"
                time.sleep(0.05)
            for s in socks[:n]:
                s.sendall(upgrade_request(port, path))  # in the kernel's buffer until the loop reads
            socks[n].sendall(upgrade_request(port, path)[:40])  # a head that is never finished
            time.sleep(BLOCKED_S)  # every deadline is past when the loop runs again
            release.write_text("")
            answers = [answer_head(s) for s in socks[:n]]
            assert answers == [b"HTTP/1.1 101 Switching Protocols"] * n
            # the slowloris guard still holds: the unfinished head is cut (408 on the HTTP side)
            assert answer_head(socks[n]) in ((b"HTTP/1.1 408 Request Timeout", b"") if listener == "http" else (b"",))
        finally:
            release.write_text("")
            for s in [*socks, blocker]:
                s.close()
