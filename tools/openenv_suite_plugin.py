"""A pytest plugin that points OpenEnv's integration suite at the server under test.

Loaded by ``tools/openenv_suite.py`` (``-p openenv_suite_plugin``) into a pytest run of OpenEnv's
own ``tests/envs/test_websockets.py``, inside the upstream venv (OpenEnv's package, its client):
nothing of the suite is changed on disk. What it does, from the environment the runner sets:

* ``OPENENV_SUITE_TARGET=ours``: the module's ``run_server`` (which starts OpenEnv's
  ``envs.echo_env.server.app`` with uvicorn) is replaced by one that starts
  ``openenv serve echo_env.server:EchoEnvironment --http-port PORT`` (this project's server,
  with the interpreter and path in ``OPENENV_SUITE_PYTHON`` / ``OPENENV_SUITE_PYTHONPATH``) on
  the same port, with ``--max-sessions N`` where the suite asks ``MAX_CONCURRENT_ENVS=N``;
  ``OPENENV_SUITE_TARGET=openenv`` starts the suite's own command (uvicorn on OpenEnv's echo
  app, ``MAX_CONCURRENT_ENVS`` in its environment). Both wait for ``/health`` up to
  :data:`STARTUP_S` and send the server's output to a file (see :func:`run_server`);
* the suite's ``skip`` marks on the concurrency tests ("run manually with
  MAX_CONCURRENT_ENVS > 1") are lifted, since the fixture sets exactly that.

The suite's ports are its own (fixed); a port already in use fails the test that needs it
with that reason, rather than talking to whatever listens there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

TARGET = os.environ.get("OPENENV_SUITE_TARGET", "ours")
UNSKIP = ("TestConcurrencyMultipleSessions",)
STARTUP_S = 120.0
"""Upper bound of a server's start (OpenEnv's imports gradio: seconds, more on a loaded machine)."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no owner
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _command(module_path: str, port: int, env_vars: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The server process of ``run_server(module_path, port, env_vars=...)`` for the target."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENENV_SUITE_")}
    env.update(env_vars)
    if TARGET == "openenv":  # the suite's own command: OpenEnv's server on its echo environment
        cmd = [sys.executable, "-m", "uvicorn", f"{module_path}:app", "--host", "127.0.0.1", "--port", str(port)]
        return cmd, env
    if module_path != "envs.echo_env.server.app":
        pytest.skip(f"{module_path}: only the echo environment is served by this project's server here")
    env["PYTHONPATH"] = os.environ.get("OPENENV_SUITE_PYTHONPATH", "")
    env.setdefault("GRPC_VERBOSITY", "ERROR")
    cmd = [os.environ["OPENENV_SUITE_PYTHON"], "-m", "openenv.cli", "serve", "echo_env.server:EchoEnvironment"]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--http-port", str(port)]
    if "MAX_CONCURRENT_ENVS" in env_vars:
        cmd += ["--max-sessions", env_vars["MAX_CONCURRENT_ENVS"]]
    return cmd, env


@contextlib.contextmanager
def run_server(
    module_path: str, port: int = 8000, startup_timeout: float = 10.0, env_vars: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The suite's ``run_server``, for either target: the same process as the suite starts
    (OpenEnv's) or this project's ``openenv serve``; its output goes to a file, not to a pipe
    nobody reads (the suite's own version blocks on ``stderr.read()`` of a live server when
    the start takes more than its 10 s, as it does on a loaded machine)."""
    if not _port_free(port):
        pytest.fail(f"port {port} (fixed by the suite) is in use: refusing to test whatever listens there")
    cmd, env = _command(module_path, port, dict(env_vars or {}))
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + max(startup_timeout, STARTUP_S)
            while not _healthy(f"http://127.0.0.1:{port}"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    out = log.read().decode(errors="replace")[-3000:]
                    raise TimeoutError(f"{' '.join(cmd)} not healthy on port {port} (exit {proc.poll()}): {out}")
                time.sleep(0.1)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    for item in items:
        if any(name in item.nodeid for name in UNSKIP):
            item.own_markers = [m for m in item.own_markers if m.name != "skip"]
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, "run_server"):
            module.run_server = run_server


def pytest_report_header(config: pytest.Config) -> str:
    return f"openenv_suite_plugin: server under test: {TARGET} " + json.dumps(
        {"python": os.environ.get("OPENENV_SUITE_PYTHON", "")} if TARGET == "ours" else {}
    )
