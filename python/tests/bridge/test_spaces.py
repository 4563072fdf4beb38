"""``openenv push --dry-run``: the Space folder, checked by serving it the way its Dockerfile does.

The upload itself (``huggingface_hub``) needs the network and an account: not run here;
only the API it calls is checked to exist.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from bridge_kit import REPO, stop, wait_file

from openenv.host import default_http_port


def test_push_dry_run_writes_a_space_that_serves(tmp_path: Path) -> None:
    out = tmp_path / "space"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "openenv.cli",
            "push",
            str(REPO / "envs" / "echo_env"),
            "--repo-id",
            "someone/echo-env",
            "--dry-run",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    readme = (out / "README.md").read_text()
    front = readme.split("---")[1]
    assert "sdk: docker" in front and "app_port: 7860" in front and "- openenv" in front
    docker = (out / "Dockerfile").read_text()
    cmd = docker.strip().splitlines()[-1]
    assert cmd.startswith("CMD [") and '"echo_env.server:EchoEnvironment"' in cmd and '"7860"' in cmd
    assert "EXPOSE 7860" in docker and "/health" in docker
    assert (out / "env" / "pyproject.toml").is_file() and (out / "vendor" / "openenv" / "pyproject.toml").is_file()
    assert (out / "vendor" / "openenv" / "src" / "openenv" / "http" / "app.py").is_file()
    assert not list(out.rglob("__pycache__"))
    # serve the folder's code the way the image does (its CMD, on a free port instead of 7860)
    env = {"PYTHONPATH": f"{out / 'env' / 'src'}:{out / 'vendor' / 'openenv' / 'src'}", "PATH": "/usr/bin:/bin"}
    ready = tmp_path / "http.url"
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from openenv.cli import main; main()",
            "serve",
            "echo_env.server:EchoEnvironment",
            "--port",
            "0",
            "--http-port",
            "0",
            "--http-ready-file",
            str(ready),
        ],
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = wait_file(ready, server)
        assert httpx.get(url + "/health", timeout=10, trust_env=False).json() == {"status": "healthy"}
        assert httpx.get(url + "/metadata", timeout=10, trust_env=False).json()["name"] == "echo_env"
    finally:
        stop(server)


def test_push_refuses_bad_input(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "openenv.cli",
            "push",
            str(REPO / "envs" / "echo_env"),
            "--repo-id",
            "not-a-repo-id",
            "--dry-run",
            "--out",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0 and "OWNER/NAME" in proc.stderr


def test_upload_uses_existing_huggingface_hub_api() -> None:
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is installed by the dev extra")
    create = inspect.signature(hub.HfApi.create_repo).parameters
    assert {"repo_id", "repo_type", "space_sdk", "private", "exist_ok"} <= set(create)
    upload = inspect.signature(hub.HfApi.upload_folder).parameters
    assert {"folder_path", "repo_id", "repo_type", "commit_message"} <= set(upload)


def test_port_env_var_is_the_http_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "7860")
    assert default_http_port(50051) == 7860
    monkeypatch.delenv("PORT")
    assert default_http_port(50051) == 8000 and default_http_port(0) == 0
