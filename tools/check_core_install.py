#!/usr/bin/env python3
"""The core install works on its own: ``make check-core-install`` (run by .ci/run).

Creates a fresh virtualenv, installs ``python/`` WITHOUT extras (``pip install ./python``, the
way a trainer installs the runtime; within the development lock's pins), checks that none of
the extras' packages came along (docker, mcp, uvicorn, websockets, httpx), then in that venv
serves an environment over gRPC
(``openenv.serve``, which must fall back to gRPC only and say so) and plays an episode with
``EnvClient``, plus ``openenv serve`` from the CLI. Prints what it did; exits 1 on any failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import lock  # tools/lock.py beside this script: the development lock

ROOT = Path(__file__).resolve().parents[1]
EXTRAS_ONLY = ("docker", "mcp", "uvicorn", "websockets", "httpx", "httptools")

SMOKE = textwrap.dedent('''
    import asyncio, importlib.util, io, contextlib, sys, threading
    import openenv

    for name in {extras!r}:
        assert importlib.util.find_spec(name) is None, f"{{name}} is installed by the core install"

    class Counter(openenv.Environment):
        """A counter."""
        action_type = {{"type": "object", "properties": {{"delta": {{"type": "integer"}}}}, "required": ["delta"]}}
        def reset(self, *, seed=None, episode_id=None, options=None):
            self.n = seed or 0
            return {{"n": self.n}}
        def step(self, action):
            self.n += action["delta"]
            return openenv.StepResult({{"n": self.n}}, reward=1.0, terminated=self.n >= 3)

    async def main():
        host = openenv.Host(Counter, "127.0.0.1", 0, http_port=openenv.host.DEFAULT)
        assert host.http_port is None, "without the http extra the HTTP side is off"
        await host.start()
        try:
            async with openenv.EnvClient(host.address) as env:
                r = await env.reset(seed=1)
                while not r.done:
                    r = await env.step({{"delta": 1}})
                assert r.observation == {{"n": 3}} and r.step_count == 2, r
            try:
                await openenv.EnvClient("http://127.0.0.1:1").connect()
            except ImportError as e:
                assert "protoenv[http]" in str(e), e
            else:
                raise AssertionError("an http:// URL without the http extra must name the extra")
        finally:
            await host.stop(1.0)
        print("core install: served over gRPC and played an episode (HTTP side off, as expected)")

    asyncio.run(main())
''').format(extras=EXTRAS_ONLY)


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)  # type: ignore[call-overload]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="openenv-core-") as tmp:
        venv = Path(tmp) / "venv"
        run([sys.executable, "-m", "venv", str(venv)])
        py = venv / "bin" / "python"
        # Within the lock's pins (requirements/dev.txt): the check gives the same answer on any
        # day; what it checks is which packages come along, not the newest releases.
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(lock.constraints_text(lock.read_lock()))
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        env = {**os.environ, "PIP_CONSTRAINT": str(constraints)}  # its build environment too (setuptools)
        run([*pip, "-c", str(constraints), str(ROOT / "python")], env=env)
        run([str(py), "-c", SMOKE])
        ready = Path(tmp) / "ready"
        proc = subprocess.Popen(
            [
                str(venv / "bin" / "openenv"),
                "serve",
                "tools.bench.envs:SyncEcho",
                "--port",
                "0",
                "--ready-file",
                str(ready),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"openenv serve did not start: {proc.stderr.read() if proc.stderr else ''}")
                time.sleep(0.1)
            run([str(venv / "bin" / "openenv"), "health", ready.read_text().strip()])
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        if "http extra" not in err:
            raise SystemExit(f"openenv serve without the http extra must say it serves gRPC only; stderr:\n{err}")
        print("core install: `openenv serve` serves gRPC only and says why")
        r = subprocess.run(  # the grpclib engine is an extra: asking for it fails at once, naming it
            [str(venv / "bin" / "openenv"), "serve", "tools.bench.envs:SyncEcho", "--port", "0", "--engine", "grpclib"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r.returncode == 0 or "protoenv[grpclib]" not in r.stderr or "Traceback" in r.stderr:
            raise SystemExit(f"openenv serve --engine grpclib without the extra must fail naming it; got:\n{r.stderr}")
        print("core install: `openenv serve --engine grpclib` fails alone, naming protoenv[grpclib]")
        for command, extra in (("build", "protoenv[docker]"),):
            r = subprocess.run(
                [str(venv / "bin" / "openenv"), command, "--help"], cwd=ROOT, capture_output=True, text=True
            )
            if r.returncode == 0 or extra not in r.stderr or "Traceback" in r.stderr:
                raise SystemExit(f"openenv {command} without its extra must fail naming {extra}; got:\n{r.stderr}")
            print(f"core install: `openenv {command}` fails alone, naming {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
