"""The pytest plugin: inert by default, one test item per check with --openenv-certify."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conformance_testlib import TESTS_DIR


def run_pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_plugin_is_inert_without_its_option(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert sorted([3, 1, 2]) == [1, 2, 3]\n")
    r = run_pytest(tmp_path, "-q", "test_plain.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
    assert "openenv-certify" not in r.stdout


@pytest.mark.slow
def test_plugin_runs_each_check_as_an_item(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    r = run_pytest(
        tmp_path,
        "-v",
        "--openenv-certify",
        "python:echo_env.server:EchoEnvironment",
        "--openenv-serve-arg=--handshake-timeout=3",  # protocol.handshake_deadline waits it out
        "--openenv-level",
        "protocol",
        "--openenv-seed",
        "9",
        f"--junitxml={junit}",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "openenv-certify(python:echo_env.server:EchoEnvironment)::protocol.handshake PASSED" in r.stdout
    assert "seed 9" in r.stdout
    names = {c.get("name") for c in ET.parse(junit).getroot().iter("testcase")}
    assert "protocol.pipelining" in names


@pytest.mark.slow
def test_plugin_reports_a_failing_check_with_its_example(tmp_path: Path) -> None:
    r = run_pytest(
        tmp_path,
        "-q",
        "--openenv-certify",
        "python:mutants.nan_reward:Env",
        "--openenv-check",
        "rewards.finite",
        "--openenv-seed",
        "4",
        "--openenv-max-examples",
        "30",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "reward is nan" in r.stdout
    assert "minimal failing example" in r.stdout
    assert "1 failed" in r.stdout


@pytest.mark.slow
def test_plugin_certifies_the_http_side(tmp_path: Path) -> None:
    r = run_pytest(
        tmp_path,
        "-v",
        "-rs",
        "--openenv-certify",
        "python:echo_env.server:EchoEnvironment",
        "--openenv-transport",
        "http",
        "--openenv-check",
        "protocol.*",
        "--openenv-check",
        "parity.*",
        "--openenv-seed",
        "9",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "::protocol.http_endpoints PASSED" in r.stdout and "::parity.grpc_vs_http PASSED" in r.stdout
    assert "::protocol.request_ids SKIPPED" in r.stdout and "gRPC only" in r.stdout
