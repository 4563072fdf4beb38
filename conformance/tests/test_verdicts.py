"""Honest verdicts (RFC 0007): the verdict names the transport and its coverage, and
``--require-transport`` turns a subset into a failure."""

from __future__ import annotations

import pytest
from conformance_testlib import mutant_target

from openenv_conformance.context import RunOptions
from openenv_conformance.runner import certify

OPTIONS = RunOptions(seed=7, max_examples=5)
CHECKS = ["protocol.*", "lifecycle.close", "lifecycle.state_before_reset"]


@pytest.mark.slow
def test_the_verdict_names_the_transport_and_a_subset_fails_a_required_transport() -> None:
    with mutant_target("base", "grpc") as target:
        full = certify(target, run_options=OPTIONS, checks=CHECKS, require_transport="grpc")
    assert full.certified and full.exit_code == 0, [(r.id, r.reason) for r in full.results if not r.ok]
    assert full.verdict.startswith("CERTIFIED (grpc, ") and "subset" not in full.verdict
    assert not full.transport_skipped, "OpenEnv's HTTP-only checks do not make a gRPC run a subset"

    with mutant_target("base", "http") as target:
        http = certify(target, run_options=OPTIONS, checks=CHECKS)
        required = certify(target, run_options=OPTIONS, checks=CHECKS, require_transport="grpc")
    assert http.certified and http.verdict.startswith("CERTIFIED (http subset, "), http.verdict
    assert "lifecycle.close" in http.transport_skipped
    assert not required.certified and required.exit_code == 1
    assert required.verdict.startswith("NOT CERTIFIED (http subset, ")
    assert "--require-transport grpc" in (required.requirement_unmet or "")
    assert required.to_dict()["verdict"] == required.verdict


def test_certify_says_what_it_waits_for() -> None:
    import socket

    from click.testing import CliRunner

    from openenv_conformance.cli import certify as certify_cli

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(certify_cli, [f"grpc://127.0.0.1:{port}", "--ready-timeout", "1", "-c", "protocol.health"])
    assert r.exit_code == 2, r.output
    assert f"waiting for grpc://127.0.0.1:{port} (up to 1 s)" in r.output, r.output
