"""Refusals as the certifier's wire sees them, over a real ``openenv serve`` process."""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from pathlib import Path

import grpc

from openenv_conformance.transport.base import StreamEnd
from openenv_conformance.transport.grpc import Wire

TOKEN = "conformance-wire-token"


def test_an_anonymous_handshake_is_refused_unauthenticated_every_time(tmp_path: Path) -> None:
    """The ``protocol.unauthenticated`` check's exchange, 300 times: each anonymous stream
    ends UNAUTHENTICATED. Regression: the server used to end a refused stream before its
    first request arrived, and grpc's client, whose write was then still in flight, reported
    about 1 in 25 of them as INTERNAL ("Internal error from Core"); certification of an
    image failed on it once in CI."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "openenv.cli", "serve", "echo_env.server:EchoEnvironment",
            "--port", "0", "--no-http", "--token", TOKEN, "--ready-file", str(ready),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not become ready within 60 s"
            time.sleep(0.05)
        wire = Wire(ready.read_text(), token=TOKEN, timeout=30)
        try:
            ends: collections.Counter[str] = collections.Counter()
            for _ in range(300):
                channel = wire.new_channel(anonymous=True)
                answer = wire.session(channel).handshake()
                ends[answer.code.name if isinstance(answer, StreamEnd) else "answered"] += 1
                wire.close_channel(channel)
            assert ends == {grpc.StatusCode.UNAUTHENTICATED.name: 300}
            assert wire.session().handshake().WhichOneof("kind") == "handshake"  # with the token
        finally:
            wire.close()
    finally:
        proc.terminate()
        proc.wait(30)
