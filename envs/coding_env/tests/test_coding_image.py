"""The coding environment inside its image, on a real Docker engine, as start_container runs
it: the server runs as the image's unprivileged user, the container gets the sandbox's
security options (openenv.sandbox.container_security_options), the sandbox has every layer,
and the hostile programs are contained while another session is served.

Needs a Docker engine (skipped with the reason without one, required when CI is set). The
image is the one ``make images`` builds (``openenv-coding-env:0.1.0``), built here offline
when missing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import openenv
from coding_env.problems import by_id
from openenv import CallToolAction

pytestmark = pytest.mark.docker

ENV_DIR = Path(__file__).resolve().parents[1]
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def coding_container() -> Iterator[Any]:
    try:
        from openenv.deploy.build import build_image
        from openenv.deploy.engine import docker_client
        from openenv.deploy.project import EnvProject
        from openenv.deploy.run import start_container
        from openenv.errors import Unavailable

        engine = docker_client()
    except (ImportError, Unavailable) as e:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"no Docker engine ({e}); CI requires the Docker tests", pytrace=False)
        pytest.skip(f"no Docker engine: {e}")
    import docker.errors

    tag = EnvProject.load(ENV_DIR).image_tag
    try:
        engine.images.get(tag)
    except docker.errors.ImageNotFound:
        lock = ENV_DIR.parents[1] / "requirements" / "dev.txt"  # as CI builds it (make images)
        build_image(ENV_DIR, tag=tag, offline=True, constraints=lock, engine=engine, echo=lambda m: None)
    container = start_container(tag, ready_timeout=120)
    try:
        yield container
    finally:
        container.stop()
        engine.close()


HOSTILE = {
    "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory-bomb": "x = []\nwhile True:\n    x.append(bytearray(10**7))\n",
    "infinite-loop": "while True:\n    pass\n",
    "write-outside": "open('/usr/lib/escape', 'w').write('x')\n",
    "read-the-server": "import os\nprint(os.listdir('/opt/openenv'))\n",
    "docker-socket": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/var/run/docker.sock')\n",
    "nested-userns": "import ctypes\nassert ctypes.CDLL(None).unshare(0x10000000 | 0x20000000) == 0\n",
    "socket-inet": "import socket\nsocket.create_connection(('127.0.0.1', 50051), timeout=1)\n",
    "kill-parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "kill-server": "import os, signal\nos.kill(1, signal.SIGKILL)\n",
    "kill-everyone": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
}


async def _call(env: Any, tool: str, code: str) -> Any:
    return await env.step(CallToolAction(tool, {"code": code}))


def test_hostile_code_is_contained_inside_the_image(coding_container: Any) -> None:
    good = by_id("sum_list").reference

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with (
            openenv.ToolEnvClient(coding_container.url, token=coding_container.token) as victim,
            openenv.ToolEnvClient(coding_container.url, token=coding_container.token) as other,
        ):
            for name, code in HOSTILE.items():
                # Rich feedback: the submissions' pass counts are what is checked.
                await victim.reset(options={"problem_id": "sum_list", "feedback": "rich"})
                await other.reset(options={"problem_id": "sum_list", "feedback": "rich"})
                hostile, ok = await asyncio.gather(_call(victim, "run_python", code), _call(other, "submit", good))
                after = await _call(victim, "submit", good)
                out[name] = (hostile.observation.result.data, ok, after)
            out["state"] = await victim.state()
        return out

    out = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    state = out.pop("state")
    for name, (res, ok, after) in out.items():
        assert res["exit_code"] != 0 or res["timed_out"], (name, res)
        for r in (ok, after):
            data = r.observation.result.data
            assert data["passed"] == data["total"] > 0 and not data["timed_out"], (name, data)
            assert r.reward == 1.0, name  # no time penalty: it may run beside 10 s of hostile code
    assert coding_container.status == "running"
    layers = state.state["isolation"]
    for name in ("user-namespace", "pid-namespace", "network-namespace", "minimal-root", "disk-quota", "memory"):
        assert any(layer.startswith(name) for layer in layers), (name, layers)
    for name in ("no-user-namespaces", "rlimits", "no-capabilities", "landlock", "seccomp"):
        assert any(layer.startswith(name) for layer in layers), (name, layers)


def test_the_image_run_without_the_sandboxs_options_refuses_to_start(coding_container: Any) -> None:
    """A plain ``docker run`` (Docker's default seccomp profile, masked /proc): the server exits
    at once saying what is missing and how to get it, and never runs code in a weaker sandbox."""
    import docker

    engine = docker.from_env()
    c = engine.containers.run(
        coding_container.image,
        detach=True,
        environment={"OPENENV_TOKEN": "t"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        read_only=True,
        tmpfs={"/tmp": "rw,size=64m"},
    )
    try:
        status = c.wait(timeout=120)
        logs = c.logs().decode(errors="replace")
    finally:
        c.remove(force=True)
        engine.close()
    assert status["StatusCode"] == 1, logs
    assert "cannot run submitted code safely" in logs and "--security-opt" in logs, logs
