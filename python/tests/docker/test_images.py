"""Environment images on a real Docker engine: offline build, the image contract, hardened
containers, clients that own their container, failures that carry the logs, ps and cleanup.

Everything runs against real containers; the echo image is built once per session offline
from the debootstrapped base (see conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

import openenv
from openenv.deploy.build import build_image
from openenv.deploy.cleanup import list_containers
from openenv.deploy.engine import MANAGED_LABEL
from openenv.deploy.project import EnvProject
from openenv.deploy.run import container_of, start_container
from openenv.errors import DeadlineExceeded, FailedPrecondition, NotFound, Unavailable

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]
TIMEOUT = 60.0


def _openenv(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _http_health(base_url: str) -> Any:
    assert base_url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(base_url + "/health", timeout=10) as r:
        return json.loads(r.read())


def test_image_carries_the_contract(engine: Any, echo_image: str) -> None:
    """Labels, non-root user, gRPC-health HEALTHCHECK, ports and command of docs/images.md."""
    attrs = engine.images.get(echo_image).attrs
    cfg = attrs["Config"]
    labels = cfg["Labels"]
    assert labels["openenv.env.name"] == "echo-env"
    assert labels["openenv.env.version"] == "0.1.0"
    assert labels["openenv.protocol.version"] == openenv.PROTOCOL_VERSION
    assert labels["openenv.factory"] == "echo_env.server:EchoEnvironment"
    assert labels["org.opencontainers.image.title"] == "openenv-echo-env"
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert cfg["User"] == "10001:10001"
    assert cfg["Healthcheck"]["Test"] == ["CMD", "openenv", "health"]
    assert set(cfg["ExposedPorts"]) == {"50051/tcp", "8000/tcp"}
    assert "OPENENV_FACTORY=echo_env.server:EchoEnvironment" in cfg["Env"]
    assert cfg["StopSignal"] == "SIGTERM"


def test_episode_through_a_client_that_owns_its_container(engine: Any, echo_image: str) -> None:
    from echo_env import CallToolAction, EchoEnv

    async def main() -> str:
        env = EchoEnv.from_docker_image(echo_image)
        assert isinstance(env, EchoEnv) and env.base_url.startswith("grpc://127.0.0.1:")
        container = container_of(env)
        assert container is not None and env.resources == (container,)
        name = container.name
        async with env:
            r = await env.reset()
            assert r.metadata == {"message": "Echo environment ready!"}
            r = await env.step(CallToolAction("echo_with_length", {"message": "hello"}))
            assert r.observation.result.structured_content == {"message": "hello", "length": 5}
            assert r.reward == pytest.approx(0.5)
            assert (await env.state()).state == {"echoed": 1}
        return name

    name = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert engine.containers.list(all=True, filters={"name": name}) == []

    with EchoEnv.from_docker_image(echo_image).sync() as env:
        container = container_of(env.client)
        assert container is not None
        name = container.name
        assert env.call_tool("echo_message", {"message": "sync"}).structured_content == {"result": "sync"}
    assert engine.containers.list(all=True, filters={"name": name}) == []


def test_hardened_defaults_and_read_only_root(engine: Any, echo_image: str, managed_names: set[str]) -> None:
    with start_container(echo_image) as c:
        managed_names.add(c.name)
        assert c.url == f"grpc://127.0.0.1:{c.port}"
        info = c.inspect()
        hc = info["HostConfig"]
        assert hc["CapDrop"] == ["ALL"]
        assert any(o.startswith("no-new-privileges") for o in hc["SecurityOpt"])
        assert hc["PidsLimit"] == 512
        assert hc["Init"] is True  # Docker's init is PID 1 (it reaps orphans), the server its child
        assert hc["Memory"] == 1024**3 and hc["MemorySwap"] == 1024**3
        assert hc["ReadonlyRootfs"] is True
        assert "/tmp" in hc["Tmpfs"]
        assert hc["PortBindings"]["50051/tcp"][0]["HostIp"] == "127.0.0.1"
        bound = info["NetworkSettings"]["Ports"]["50051/tcp"]
        assert {b["HostIp"] for b in bound} == {"127.0.0.1"}
        labels = info["Config"]["Labels"]
        assert labels["openenv.managed"] == "true" and labels["openenv.env"] == "echo-env"
        assert labels["openenv.session"] == c.session and labels["openenv.owner"].endswith(
            f":{os.getpid()}:{labels['openenv.owner'].rsplit(':', 1)[1]}"
        )
        raw = engine.containers.get(c.id)
        assert raw.exec_run(["id", "-u"]).output.decode().strip() == "10001"
        assert raw.exec_run(["sh", "-c", "echo x > /etc/openenv-probe"]).exit_code != 0  # read-only root
        assert raw.exec_run(["sh", "-c", "echo x > /tmp/probe && cat /tmp/probe"]).output.decode().strip() == "x"
        assert raw.exec_run(["cat", "/proc/1/comm"]).output.decode().strip() == "docker-init"
        server = raw.exec_run(["sh", "-c", "grep -l '^PPid:\t1$' /proc/[0-9]*/status | head -n 1"]).output.decode()
        status = raw.exec_run(["sh", "-c", f"grep -E '^(Name|CapEff|NoNewPrivs)' {server.strip()}"]).output.decode()
        assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status, status
        health = raw.exec_run(["openenv", "health"])  # the image's HEALTHCHECK command
        assert health.exit_code == 0 and health.output.decode().strip() == "SERVING"
        assert info["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostIp"] == "127.0.0.1"
        assert _http_health(c.http_url) == {"status": "healthy"}  # the HTTP/WebSocket side on 8000
        # RFC 0003: the server listens on the container's interfaces, so it requires the token
        # start_container generated; the restart policy brings a killed server back.
        assert hc["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
        assert c.token and f"OPENENV_TOKEN={c.token}" in info["Config"]["Env"]

        async def anonymous_then_with_token() -> None:
            with pytest.raises(openenv.Unauthenticated):
                async with openenv.EnvClient(c.url, token="", connect_timeout=TIMEOUT):
                    pass
            async with openenv.EnvClient(c.url, token=c.token) as env:
                await env.reset()

        asyncio.run(asyncio.wait_for(anonymous_then_with_token(), TIMEOUT))
    assert c.exit_code == 0, f"SIGTERM did not stop the server gracefully:\n{c.logs()}"
    assert "serving EchoEnvironment" in c.logs()


def test_network_none(engine: Any, echo_image: str, managed_names: set[str]) -> None:
    from echo_env import EchoEnv

    with start_container(echo_image, network_none=True, memory="512m", pids_limit=128) as c:
        managed_names.add(c.name)
        info = c.inspect()
        assert info["HostConfig"]["NetworkMode"] == "none"
        assert info["HostConfig"]["PidsLimit"] == 128 and info["HostConfig"]["Memory"] == 512 * 1024**2
        ifaces = engine.containers.get(c.id).exec_run(["ls", "/sys/class/net"]).output.decode().split()
        assert ifaces == ["lo"]

        async def play() -> None:
            async with EchoEnv(c.url, token=c.token) as env:
                await env.reset()
                for i in range(20):
                    r = await env.call_tool("echo_message", {"message": "x" * i})
                    assert r.structured_content == {"result": "x" * i}

        asyncio.run(asyncio.wait_for(play(), TIMEOUT))
        assert _http_health(c.http_url) == {"status": "healthy"}
    assert c.exit_code == 0


def test_a_container_that_exits_reports_its_logs(engine: Any, echo_image: str) -> None:
    case = _case_label()
    with pytest.raises(Unavailable) as exc:
        start_container(
            echo_image,
            command=["python3", "-c", "import sys; print('boom-marker'); sys.exit(3)"],
            ready_timeout=30,
            labels=case,
        )
    assert "exited with code 3" in exc.value.message
    assert "boom-marker" in exc.value.message and "boom-marker" in exc.value.logs  # type: ignore[attr-defined]
    assert _containers_labelled(engine, case) == []  # removed


def test_a_container_that_never_serves_times_out(engine: Any, echo_image: str) -> None:
    case = _case_label()
    with pytest.raises(DeadlineExceeded) as exc:
        start_container(
            echo_image,
            command=["sh", "-c", "echo waiting-forever; exec sleep 600"],
            ready_timeout=10,  # the container has started and printed its line by then, even on a loaded machine
            labels=case,
        )
    assert "within 10 s" in exc.value.message and "waiting-forever" in exc.value.message
    assert _containers_labelled(engine, case) == []  # removed


def _case_label() -> dict[str, str]:
    """A label only this test's container carries: other containers the engine runs meanwhile
    (another suite, another checkout) must not count as this test's leftovers."""
    return {"openenv.test.case": uuid.uuid4().hex}


def _containers_labelled(engine: Any, label: dict[str, str]) -> list[str]:
    ((key, value),) = label.items()
    return [c.id for c in engine.containers.list(all=True, filters={"label": f"{key}={value}"})]


def test_missing_image_and_bad_builds(engine: Any, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="not present locally"):
        start_container("openenv-no-such-image:0")
    with pytest.raises(NotFound, match=r"no pyproject\.toml"):
        build_image(tmp_path, engine=engine, echo=lambda m: None)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    with pytest.raises(FailedPrecondition, match=r"\[tool.openenv\] factory"):
        build_image(tmp_path, engine=engine, echo=lambda m: None)
    with pytest.raises(FailedPrecondition, match="not present locally and an offline build cannot pull"):
        build_image(
            REPO / "envs" / "echo_env",
            base_image="openenv-no-such-base:0",
            offline=True,
            engine=engine,
            echo=lambda m: None,
        )
    r = _openenv("build", str(REPO / "envs" / "echo_env"), "--offline", "--base-image", "openenv-no-such-base:0")
    assert r.returncode == 1 and "cannot pull" in r.stderr and "Traceback" not in r.stderr


def test_a_failing_build_shows_the_build_output(engine: Any, base_image: str, tmp_path: Path) -> None:
    env = tmp_path / "broken_env"
    shutil.copytree(REPO / "envs" / "echo_env", env, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    (env / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo broken-step-marker && exit 7\n")
    with pytest.raises(openenv.Internal) as exc:
        build_image(
            env,
            tag="openenv-broken:pytest",
            base_image=base_image,
            offline=True,
            constraints=REPO / "requirements" / "dev.txt",
            engine=engine,
            echo=lambda m: None,
        )
    assert "broken-step-marker" in exc.value.message and "non-zero code: 7" in exc.value.message


def test_ps_lists_and_cleanup_removes_leftovers_of_a_crashed_owner(
    engine: Any, echo_image: str, managed_names: set[str]
) -> None:
    # An owner process that crashes (SIGKILL) while its container runs.
    code = (
        "import sys; from openenv.deploy.run import start_container; "
        f"c = start_container({echo_image!r}); print(c.name, flush=True); sys.stdin.read()"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        orphan = owner.stdout.readline().strip()  # type: ignore[union-attr]
        assert orphan.startswith("openenv-echo-env-"), orphan
        managed_names.add(orphan)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
    with start_container(echo_image) as mine:
        managed_names.add(mine.name)
        r = _openenv("ps", "--json")
        assert r.returncode == 0, r.stderr
        rows = {row["name"]: row for row in json.loads(r.stdout)}
        assert rows[orphan]["owner_alive"] is False and rows[orphan]["status"] == "running"
        assert rows[mine.name]["owner_alive"] is True and rows[mine.name]["url"] == mine.url
        assert rows[mine.name]["env"] == "echo-env" and rows[mine.name]["image"] == echo_image
        table = _openenv("ps")
        assert mine.name in table.stdout and "gone" in table.stdout

        dry = _openenv("cleanup", "--dry-run")
        assert f"would remove {orphan}" in dry.stdout and mine.name not in dry.stdout
        assert engine.containers.get(orphan).status == "running"
        r = _openenv("cleanup")
        assert r.returncode == 0 and f"removing {orphan}" in r.stdout and mine.name not in r.stdout
        names = {m.name for m in list_containers(engine)}
        assert orphan not in names and mine.name in names
        assert mine.status == "running"


def test_ps_lists_while_managed_containers_come_and_go(engine: Any, echo_image: str) -> None:
    """Containers removed while ``openenv ps`` lists them (another client's, a concurrent cleanup)
    are left out, never an error: the engine lists ids first and each is inspected after."""
    case = _case_label()
    labels = {MANAGED_LABEL: "true", **case}
    kept = engine.containers.create(echo_image, labels=labels)
    stop = threading.Event()
    churned = 0

    def churn() -> None:
        nonlocal churned
        while not stop.is_set():
            engine.containers.create(echo_image, labels=labels).remove(force=True)
            churned += 1

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        for _ in range(40):
            assert kept.name in {m.name for m in list_containers(engine)}
    finally:
        stop.set()
        churner.join(60)
        kept.remove(force=True)
    assert churned > 0  # containers did come and go while it listed
    assert _containers_labelled(engine, case) == []


def test_build_cli_shows_progress_and_prints_the_tag(engine: Any, base_image: str) -> None:
    r = _openenv(
        "build",
        str(REPO / "envs" / "echo_env"),
        "--offline",
        "--constraint",
        str(REPO / "requirements" / "dev.txt"),
        "--base-image",
        base_image,
        "--tag",
        "openenv-echo-env:pytest-cli",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "openenv-echo-env:pytest-cli"
    assert "Step 1/" in r.stderr and "built openenv-echo-env:pytest-cli" in r.stderr
    assert "constraints: " in r.stderr and "pins from" in r.stderr
    assert EnvProject.load(REPO / "envs" / "echo_env").image_tag == "openenv-echo-env:0.1.0"
    engine.images.remove("openenv-echo-env:pytest-cli")


def test_owner_liveness_is_exact() -> None:
    from openenv.deploy.run import _owner_token, owner_alive

    assert owner_alive(_owner_token()) is True
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    host, _, _ = _owner_token().split(":")
    assert owner_alive(f"{host}:{dead.pid}:1") is False
    assert owner_alive("some-other-host:1:1") is None
