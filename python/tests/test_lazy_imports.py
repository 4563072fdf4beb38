"""An idle server imports only what serving needs: the optional parts (the client side, the
HTTP side, metrics nobody can scrape, tracing nobody configured, process isolation, the JSON
Schema validator, pydantic for an environment without typed actions, the other commands)
are imported on first use. Idle RSS is what this keeps down (docs/performance.md); the test
checks the modules, not a memory figure, which would be noisy."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openenv_testkit import TESTS_DIR, WAIT_S, wait_until

import openenv

pytestmark = pytest.mark.anyio

OPENENV_CLI = str(Path(sys.executable).parent / "openenv")

#: Never imported by ``openenv serve --no-http`` of a JSON environment, open and after a session.
NOT_WHEN_SERVING = [
    "openenv.client",  # the client side
    "openenv.http",  # the HTTP side
    "uvicorn",
    "starlette",
    "websockets",
    "anyio",
    "httpx",
    "mcp",
    "prometheus_client",  # metrics: no HTTP side, no --metrics-port, so nobody could scrape them
    "opentelemetry",  # tracing: no provider configured
    "multiprocessing",  # --isolation process only
    "importlib.metadata",  # entry points of other commands and importers
    "jsonschema",  # the validator of declared JSON Schemas / typed actions
    "pydantic",  # typed (dataclass, pydantic) actions only
    "numpy",  # tensors only
    "grpclib",  # --engine grpclib only
    "hypothesis",
    "yaml",
    "betterproto2",
    "openenv.harness",
    "openenv.fleet",
    "openenv.record",
    "openenv.deploy",
    "openenv.gym",
    "openenv.evals",
]


def _loaded(names: list[str], code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(sorted(n for n in {names!r} if n in sys.modules))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=TESTS_DIR,
    )
    return eval(out.stdout.strip().splitlines()[-1])  # a list of str literals, printed just above


def test_importing_openenv_or_its_server_leaves_the_optional_parts_unimported() -> None:
    assert _loaded(NOT_WHEN_SERVING, "import openenv, openenv.server, openenv.host, openenv.cli.serve") == []
    assert _loaded(["openenv.client.env"], "import openenv\nopenenv.EnvClient") == ["openenv.client.env"]


async def test_a_serving_process_imports_none_of_the_optional_parts(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = await asyncio.create_subprocess_exec(
        OPENENV_CLI,
        "serve",
        "openenv_idle_env:ImportedModules",
        *("--port", "0", "--no-http", "--idle-timeout", "0", "--ready-file", str(ready)),
        cwd=str(TESTS_DIR),
        stderr=asyncio.subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"GRPC_VERBOSITY": "ERROR"},
    )
    try:
        await wait_until(lambda: ready.exists() and bool(ready.read_text()), timeout=WAIT_S * 6, what="ready file")
        async with openenv.EnvClient(ready.read_text().strip()) as env:
            await env.reset()
            first = (await env.step({"modules": NOT_WHEN_SERVING})).observation
        async with openenv.EnvClient(ready.read_text().strip()) as env:  # and after a session closed
            await env.reset()
            again = (await env.step({"modules": [*NOT_WHEN_SERVING, "grpc", "openenv.server"]})).observation
        assert first == []
        assert again == ["grpc", "openenv.server"]  # the probe sees what is imported
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), WAIT_S)
