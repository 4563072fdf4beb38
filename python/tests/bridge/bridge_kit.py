"""Helpers of the bridge tests: servers on loopback with their HTTP side, raw WebSocket
sessions speaking OpenEnv's frames, and the upstream OpenEnv venv (``tools/openenv_upstream.py``).

Nothing is mocked: every test talks to a real server over 127.0.0.1 (port 0), and the
upstream package runs from its own virtualenv in subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import openenv

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
WAIT_S = 20.0
"""Upper bound of every wait (never a timing assertion)."""

sys.path.insert(0, str(REPO))


@contextlib.asynccontextmanager
async def served(factory: Any, **kwargs: Any) -> AsyncIterator[openenv.Host]:
    """An in-process ``openenv.Host``: gRPC and its HTTP side, both on port 0."""
    kwargs.setdefault("http_port", 0)
    srv = openenv.Host(factory, "127.0.0.1", 0, **kwargs)
    await asyncio.wait_for(srv.start(), WAIT_S)
    try:
        yield srv
    finally:
        await asyncio.wait_for(srv.stop(1.0), WAIT_S)


def ws_url(http_url: str, query: str = "") -> str:
    return http_url.replace("http://", "ws://") + "/ws" + (f"?{query}" if query else "")


class Ws:
    """A raw WebSocket speaking OpenEnv's frames; every receive is bounded by WAIT_S."""

    def __init__(self, url: str, **kw: Any) -> None:
        self.url, self.kw = url, kw
        self.ws: Any = None

    async def __aenter__(self) -> Ws:
        from websockets.asyncio.client import connect

        self.ws = await asyncio.wait_for(connect(self.url, **self.kw), WAIT_S)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.ws.close()

    async def send(self, frame: Any) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), WAIT_S))

    async def ask(self, frame: Any) -> dict[str, Any]:
        await self.send(frame)
        return await self.recv()


async def wait_until(pred: Any, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def wait_file(path: Path, proc: subprocess.Popen[Any], timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"server exited with {proc.returncode}: {out[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"server not ready after {timeout:g} s")
        time.sleep(0.05)
    return path.read_text().strip()


async def wait_file_async(path: Path, proc: subprocess.Popen[Any], timeout: float = 60.0) -> str:
    """:func:`wait_file` that keeps the event loop (and in-process servers) running."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"process exited with {proc.returncode}: {out[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"not ready after {timeout:g} s")
        await asyncio.sleep(0.05)
    return path.read_text().strip()


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def env_with_path(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), env.get("PYTHONPATH", "")])
    env.setdefault("GRPC_VERBOSITY", "ERROR")
    return env


@contextlib.contextmanager
def openenv_serve(target: str, tmp: Path, *args: str) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """``openenv serve TARGET`` in a subprocess: (gRPC address, HTTP URL, process)."""
    grpc_ready, http_ready = tmp / f"grpc-{time.monotonic_ns()}", tmp / f"http-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openenv.cli",
            "serve",
            target,
            "--port",
            "0",
            "--http-port",
            "0",
            "--ready-file",
            str(grpc_ready),
            "--http-ready-file",
            str(http_ready),
            *args,
        ],
        env=env_with_path(HERE),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield wait_file(grpc_ready, proc), wait_file(http_ready, proc), proc
    finally:
        stop(proc)


# --------------------------------------------------------------------------- upstream OpenEnv

UPSTREAM = (("openenv", "0.10.0"), ("openenv-core", "0.3.0"))


def upstream_env() -> dict[str, str]:
    """The environment of a process of the upstream venv: only this directory on its path,
    never the caller's PYTHONPATH (a worktree's sources there would shadow OpenEnv's own
    ``openenv`` package, which has the same name)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(HERE)
    e.setdefault("GRPC_VERBOSITY", "ERROR")
    return e


def upstream_python(dist: str, version: str) -> Path:
    """The interpreter of the cached venv holding the real OpenEnv release (created once)."""
    from tools.openenv_upstream import ensure

    try:
        return ensure(dist, version)
    except RuntimeError as e:
        if os.environ.get("OPENENV_INTEROP_OPTIONAL"):
            pytest.skip(f"cannot install {dist}=={version} from the package index: {str(e)[:300]}")
        raise


@contextlib.contextmanager
def upstream_server(python: Path, app: str, tmp: Path, **env: str) -> Iterator[str]:
    """An OpenEnv app served by OpenEnv's own stack (uvicorn) from its venv; yields its URL."""
    ready = tmp / f"upstream-{time.monotonic_ns()}.url"
    e = upstream_env()
    e.pop("ENABLE_WEB_INTERFACE", None)
    e.update(env)
    proc = subprocess.Popen(
        [str(python), str(HERE / "upstream_serve.py"), app, str(ready)],
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = wait_file(ready, proc, timeout=120)
        _wait_health(url, proc)
        yield url
    finally:
        stop(proc)


def _wait_health(url: str, proc: subprocess.Popen[Any], timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"upstream server at {url} not healthy (exit code {proc.poll()})")
        time.sleep(0.1)


def run_upstream(python: Path, *args: str, timeout: float = 120.0) -> Any:
    """Run a script in the upstream venv (cwd: this directory) and parse its JSON output."""
    e = upstream_env()
    proc = subprocess.run(
        [str(python), *args], cwd=str(HERE), env=e, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
