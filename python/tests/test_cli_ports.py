"""A port another process holds is refused by the CLI's servers in one clear line (exit 1, no
traceback, no gRPC core log), and the harness's scripted model does not default to the port
``openenv serve`` puts its HTTP side on (issue 33: the quick start's two processes clashed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openenv_testkit import REPO_ROOT

from openenv.host import default_http_port

WAIT_S = 60.0


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port with a listener on it (another process's, as far as the CLI knows)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _openenv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", *args],
        cwd=str(REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _one_line_refusal(done: subprocess.CompletedProcess[str], what: str, port: int, option: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        f"Error: {what} cannot listen on 127.0.0.1:{port}: another process is using that port "
        f"(stop it, or choose another with {option}; {option} 0 picks a free one)"
    ], done.stderr


@pytest.mark.parametrize(
    ("flags", "what", "option"),
    [
        (["--port", "{port}", "--no-http"], "the gRPC side", "--port"),
        (["--port", "0", "--http-port", "{port}"], "the HTTP side", "--http-port"),
    ],
)
def test_openenv_serve_refuses_a_taken_port_in_one_line(
    taken_port: int, flags: list[str], what: str, option: str
) -> None:
    args = [f.format(port=taken_port) for f in flags]
    done = _openenv("serve", "openenv_testenvs:Counter", *args)
    _one_line_refusal(done, what, taken_port, option)


def test_the_scripted_model_refuses_a_taken_port_in_one_line_and_avoids_serves_port(
    taken_port: int, tmp_path: Path
) -> None:
    pytest.importorskip("openenv.harness")
    from openenv.cli.harness import SCRIPTED_MODEL_PORT

    assert SCRIPTED_MODEL_PORT not in (default_http_port(50051), 8100)  # serve's HTTP side, the proxy
    script = tmp_path / "steps.json"
    script.write_text('{"steps": [{"text": "hi"}]}')
    done = _openenv("harness", "scripted-model", "--script", str(script), "--port", str(taken_port))
    _one_line_refusal(done, "the scripted model", taken_port, "--port")
    from openenv.cli.harness import scripted_model_command

    [port_option] = [p for p in scripted_model_command.params if p.name == "port"]
    assert port_option.default == SCRIPTED_MODEL_PORT  # what `openenv harness scripted-model` listens on
