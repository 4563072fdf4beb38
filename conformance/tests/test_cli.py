"""`openenv certify` end to end: exit codes 0/1/2 and the JSON, JUnit and Markdown outputs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conformance_testlib import TESTS_DIR

from openenv_conformance.registry import all_checks


def certify(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", "certify", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_list_checks_names_every_check() -> None:
    r = certify("--list-checks")
    assert r.returncode == 0, r.stderr
    for c in all_checks():
        assert c.id in r.stdout


@pytest.mark.slow
def test_certified_target_exits_0_and_writes_every_report(tmp_path: Path) -> None:
    rep, junit, md = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"
    r = certify(
        "python:echo_env.server:EchoEnvironment",
        "--serve-arg=--handshake-timeout=3",  # protocol.handshake_deadline waits it out
        "--level",
        "protocol",
        "--level",
        "tools",
        "--seed",
        "5",
        "--max-examples",
        "10",
        "--report",
        str(rep),
        "--junit",
        str(junit),
        "--markdown",
        str(md),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CERTIFIED" in r.stdout and "exit 0" in r.stdout
    data = json.loads(rep.read_text())
    assert data["format"] == "openenv-certify-report/1"
    assert data["certified"] is True and data["exit_code"] == 0
    assert data["target"] == "python:echo_env.server:EchoEnvironment"
    assert data["protocol_version"] == "1.6" and data["suite_protocol_version"] == "1.6"
    assert data["suite_version"] and data["seed"] == 5
    assert data["environment"]["name"] == "echo_env"
    assert {r["level"] for r in data["results"]} == {"protocol", "tools"}
    assert all(r["status"] in ("pass", "skip") for r in data["results"])
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == len(data["results"])
    assert {c.get("name") for c in cases} == {r["id"] for r in data["results"]}
    text = md.read_text()
    assert "**certified** (exit 0)" in text and "`protocol.handshake`" in text


@pytest.mark.slow
def test_failing_check_exits_1_with_the_minimal_example_and_seed(tmp_path: Path) -> None:
    rep, junit, md = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"
    r = certify(
        "python:mutants.nan_reward:Env",
        "--check",
        "rewards.*",
        "--seed",
        "3",
        "--max-examples",
        "30",
        "--report",
        str(rep),
        "--junit",
        str(junit),
        "--markdown",
        str(md),
        cwd=TESTS_DIR,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT CERTIFIED" in r.stdout and "FAIL" in r.stdout
    data = json.loads(rep.read_text())
    assert data["exit_code"] == 1 and data["certified"] is False
    res = {x["id"]: x for x in data["results"]}
    bad = res["rewards.finite"]
    assert bad["status"] == "fail"
    assert "nan" in bad["reason"]
    assert bad["example"] and '"delta":3' in bad["example"]  # the minimal failing example
    assert bad["seed"] == 3 and "--seed 3" in bad["reproduce"] and "--check rewards.finite" in bad["reproduce"]
    assert data["logs"] is not None  # the target's output travels with a failing report
    failed_cases = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert "rewards.finite" in failed_cases
    assert "**not certified** (exit 1)" in md.read_text() and "Minimal failing example" in md.read_text()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "target",
    [
        "grpc://127.0.0.1:{port}",
        "python:conformance_no_such_module:Env",
        "docker:openenv-conformance-no-such-image:latest",
        "ftp://example",
    ],
)
def test_unusable_target_exits_2(target: str, tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    r = certify(target.format(port=_closed_port()), "--ready-timeout", "3", "--report", str(rep))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "target unusable" in r.stdout
    data = json.loads(rep.read_text())
    assert data["exit_code"] == 2 and data["unusable"]


def test_unknown_level_is_a_usage_error() -> None:
    r = certify("python:x:Y", "--level", "nonsense")
    assert r.returncode == 2
    assert "nonsense" in r.stderr


@pytest.mark.slow
def test_python_api_works_from_async_code() -> None:
    import asyncio

    from openenv_conformance import certify as api_certify

    async def main() -> int:
        report = api_certify(
            "python:echo_env.server:EchoEnvironment", checks=["protocol.handshake", "lifecycle.step_count"], seed=1
        )
        return report.exit_code

    assert asyncio.run(main()) == 0


def _children_serving(parent: int) -> list[int]:
    """Pids of `openenv serve` processes whose parent is ``parent``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"serve" in cmdline:
            found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_certifier_killed_with_sigkill_leaves_no_server_behind() -> None:
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))}
    certifier = subprocess.Popen(
        [sys.executable, "-m", "openenv.cli", "certify", "python:echo_env.server:EchoEnvironment", "--seed", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        servers: list[int] = []
        while not servers and certifier.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            servers = _children_serving(certifier.pid)
        assert servers, "the certifier never started its server"
    finally:
        certifier.kill()
        certifier.wait()
    deadline = time.monotonic() + 60
    while not all(_gone(p) for p in servers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in servers if not _gone(p)]
    for p in left:  # do not leak it into the rest of the run, then fail
        os.kill(p, signal.SIGKILL)
    assert not left, f"servers {left} outlived the SIGKILLed certifier"


@pytest.mark.slow
def test_a_check_not_exercised_is_listed_and_fails_with_require_exercised(tmp_path: Path) -> None:
    """echo_env steps on the event loop: no step outlives a timeout, so lifecycle.timeout_aborts
    is not exercised. Certified by default, with the check named; --require-exercised fails it.
    --durations profiles the run."""
    args = ["python:echo_env.server:EchoEnvironment", "-c", "lifecycle.timeout_aborts", "-c", "protocol.handshake"]
    r = certify(*args, "--seed", "3", "--durations", "0", "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CERTIFIED (grpc, 1 checks; 1 not exercised)" in r.stdout, r.stdout
    assert "NOEX lifecycle.timeout_aborts" in r.stdout and "--require-exercised" in r.stdout
    assert "slowest checks" in r.stdout and "per level:" in r.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["not_exercised"] == ["lifecycle.timeout_aborts"] and data["certified"] is True
    r = certify(*args, "--seed", "3", "--require-exercised")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT CERTIFIED" in r.stdout and "--require-exercised: 1 checks were not exercised" in r.stdout
