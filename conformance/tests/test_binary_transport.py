"""The certifier over the binary WebSocket transport (RFC 0011): a reference environment
passes every level but sandbox over ``ws://HOST:PORT/v1/session`` with ``--require-transport
binary`` (the parity check compares it with the target's gRPC side), and binary URLs are
recognised as their own transport."""

from __future__ import annotations

from pathlib import Path

import pytest
from conformance_testlib import ROOT, quick_serve_args

from openenv_conformance.registry import LEVELS
from openenv_conformance.runner import certify
from openenv_conformance.targets import HttpTarget, TargetOptions
from openenv_conformance.transport import transport_kind

NOT_SANDBOX = [lv for lv in LEVELS if lv != "sandbox"]
ECHO = Path(ROOT) / "envs" / "echo_env"
FACTORY = "echo_env.server:EchoEnvironment"


def test_binary_urls_are_their_own_transport() -> None:
    assert transport_kind("ws://127.0.0.1:8000/v1/session") == "binary"
    assert transport_kind("https://h.example/env/v1/session") == "binary"
    assert transport_kind("ws://127.0.0.1:8000") == "http"
    assert HttpTarget("ws://127.0.0.1:8000/v1/session").transports() == {"binary": "ws://127.0.0.1:8000/v1/session"}


@pytest.mark.slow
def test_every_level_but_sandbox_passes_over_the_binary_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ECHO)
    report = certify(
        f"python:{FACTORY}",
        levels=NOT_SANDBOX,
        seed=20261129,
        max_examples=3,
        target_options=TargetOptions(transport="binary", serve_args=quick_serve_args(FACTORY)),
        require_transport="binary",
    )
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    bad = [(r.id, r.status, r.reason, r.example) for r in report.results if r.status in ("fail", "error")]
    assert not bad, bad
    assert report.transport == "binary" and report.target_url.endswith("/v1/session")
    assert not report.transport_skipped and report.exit_code == 0, report.verdict
    for cid in ("protocol.request_ids", "protocol.handshake_deadline", "protocol.pipelined_messages"):
        assert report.result(cid).status == "pass", (cid, report.result(cid).reason)
    assert report.result("parity.grpc_vs_http").status == "pass"  # binary against the gRPC side
    for r in report.results:
        if r.status == "skip":
            assert r.reason, f"{r.id} skipped without a reason"


@pytest.mark.slow
def test_every_level_but_sandbox_passes_over_the_picows_listener(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The binary transport's own listener (``openenv serve --binary-port``), certified by URL."""
    import os
    import subprocess
    import sys
    import time

    monkeypatch.chdir(ECHO)
    ready = tmp_path / "binary.url"
    proc = subprocess.Popen(
        [sys.executable, "-m", "openenv.cli", "serve", FACTORY, "--port", "0",
         "--no-http", "--binary-port", "0", "--binary-ready-file", str(ready), *quick_serve_args(FACTORY)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ECHO), os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
            time.sleep(0.05)
        url = ready.read_text().strip()
        assert url.startswith("ws://127.0.0.1:") and url.endswith("/v1/session")
        report = certify(url, levels=NOT_SANDBOX, seed=20261129, max_examples=3, require_transport="binary")
        assert report.unusable is None, f"{report.unusable}\n{report.logs}"
        bad = [(r.id, r.status, r.reason, r.example) for r in report.results if r.status in ("fail", "error")]
        assert not bad, bad
        assert report.transport == "binary" and report.exit_code == 0, report.verdict
        for cid in ("protocol.request_ids", "protocol.pipelined_messages"):
            assert report.result(cid).status == "pass", (cid, report.result(cid).reason)
    finally:
        proc.terminate()
        proc.wait(15)
