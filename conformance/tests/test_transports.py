"""Targets reached over OpenEnv's JSON protocol (HTTP/WebSocket): `openenv bridge` in front of
a gRPC server, `ws://` and `http://` URLs of running servers, `--parity-with`, and a stock
OpenEnv server (the real OpenEnv release, from its own virtualenv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conformance_testlib import ROOT, TESTS_DIR, quick_serve_args

from openenv_conformance.runner import certify
from openenv_conformance.targets import ProcessTarget, TargetOptions

BIN = Path(sys.executable).parent


@contextmanager
def _serve(factory: str, *extra: str) -> Iterator[ProcessTarget]:
    """`openenv serve FACTORY` (gRPC, and HTTP unless --no-http) as a running server, with a
    test's capacity and handshake deadline (conformance_testlib.quick_serve_args)."""
    http = "--no-http" not in extra

    def argv(ready: str, http_ready: str = "") -> list[str]:
        more = ["--http-port", "0", "--http-ready-file", http_ready] if http else []
        return [
            sys.executable,
            "-m",
            "openenv.cli",
            "serve",
            factory,
            "--port",
            "0",
            "--ready-file",
            ready,
            *more,
            *quick_serve_args(factory),
            *extra,
        ]

    with ProcessTarget(argv, spec=f"serve:{factory}", http_ready=http) as target:
        yield target


@contextmanager
def _bridge(grpc_url: str) -> Iterator[ProcessTarget]:
    """`openenv bridge GRPC_URL` (OpenEnv's HTTP surface in front of a remote gRPC server)."""
    with ProcessTarget(
        lambda ready: [sys.executable, "-m", "openenv.cli", "bridge", grpc_url, "--port", "0", "--ready-file", ready],
        spec=f"bridge:{grpc_url}",
    ) as target:
        yield target


def _bad(report) -> list:
    return [(r.id, r.status, r.reason, r.example) for r in report.results if r.status in ("fail", "error")]


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["echo_env.server:EchoEnvironment", "gridworld.server:GridWorldEnvironment"])
def test_openenv_bridge_in_front_of_a_grpc_server_is_certified(factory: str) -> None:
    """A stock-OpenEnv-protocol target: `openenv bridge grpc://...` (one gRPC stream per
    WebSocket session, payloads converted with the remote's descriptors), certified over
    HTTP and compared with the gRPC server behind it."""
    pytest.importorskip(factory.partition(".")[0])
    with _serve(factory, "--no-http") as server, _bridge(server.url) as bridge:
        assert bridge.url.startswith("http://")
        # 10 examples, as the reference environments' HTTP sides: every example crosses the same
        # generic translation (30 cost 210 s of CI for echo_env under load, for no other path).
        report = certify(
            bridge.url, seed=20261129, max_examples=10, target_options=TargetOptions(parity_with=server.url)
        )
    assert report.unusable is None, report.unusable
    assert not _bad(report), _bad(report)
    assert report.exit_code == 0 and report.transport == "http" and report.parity_url == server.url
    for cid in (
        "protocol.http_endpoints",
        "lifecycle.state_machine",
        "lifecycle.episode_ids",
        "schema.invalid_actions",
        "concurrency.capacity",
        "parity.grpc_vs_http",
    ):
        assert report.result(cid).status == "pass", (cid, report.result(cid).reason)


@pytest.mark.slow
def test_ws_url_of_a_running_server_from_the_command_line(tmp_path: Path) -> None:
    """`openenv certify ws://HOST:PORT` with `--parity-with grpc://...`: exit 0, the report
    names the transport and the parity peer; giving the same transport as peer is unusable."""
    with _serve("echo_env.server:EchoEnvironment") as server:
        http = server.urls["http"]
        ws = "ws://" + http.removeprefix("http://") + "/ws"
        rep = tmp_path / "r.json"
        r = subprocess.run(
            [
                str(BIN / "openenv"),
                "certify",
                ws,
                "--parity-with",
                server.url,
                "--seed",
                "5",
                "--max-examples",
                "20",
                "--level",
                "lifecycle",
                "--level",
                "parity",
                "--report",
                str(rep),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
        data = json.loads(rep.read_text())
        assert data["transport"] == "http" and data["target_url"] == ws and data["parity_url"] == server.url
        assert {x["id"]: x["status"] for x in data["results"]}["parity.grpc_vs_http"] == "pass"
        r = subprocess.run(
            [str(BIN / "openenv"), "certify", ws, "--parity-with", http, "--level", "parity"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert r.returncode == 2 and "other transport" in r.stdout, r.stdout[-3000:]


def _upstream_python() -> Path:
    sys.path.insert(0, str(ROOT))
    try:
        from tools.openenv_upstream import ensure
    finally:
        sys.path.remove(str(ROOT))
    try:
        return ensure("openenv", "0.10.0")
    except RuntimeError as e:
        if os.environ.get("OPENENV_INTEROP_OPTIONAL"):
            pytest.skip(f"cannot install openenv==0.10.0 from the package index: {str(e)[:300]}")
        raise


@pytest.mark.slow
def test_stock_openenv_server_is_certified_on_what_its_protocol_shows() -> None:
    """A server written and served with the real OpenEnv release: no openenv.hello, no episode
    fields, described by /metadata and /schema. What its protocol shows is checked
    (observations against /schema, rewards, invalid actions, health, survival); the episode
    state machine is skipped with the reason."""
    python = _upstream_python()
    target = ProcessTarget(
        lambda ready: [str(python), str(TESTS_DIR / "stock_openenv" / "serve_counter.py"), ready],
        spec="stock-openenv:counter",
    )
    with target:
        report = certify(target, seed=20261129, max_examples=30)
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    assert not _bad(report), _bad(report)
    assert report.environment["name"] == "Counter" and report.transport == "http"  # /metadata names the class
    for cid in (
        "protocol.http_endpoints",
        "schema.observations",
        "schema.error_precedence",
        "rewards.finite",
        "tools.unimplemented",
        "robustness.still_serving",
    ):
        assert report.result(cid).status == "pass", (cid, report.result(cid).reason)
    assert "stock OpenEnv" in report.result("lifecycle.state_machine").reason
    assert report.result("parity.grpc_vs_http").status == "skip"
