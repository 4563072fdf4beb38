"""``openenv init`` → its own tests → ``openenv build --offline`` → an episode in the container
→ ``openenv certify docker:IMAGE``: a scaffolded environment works as it stands."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import openenv
from openenv.deploy.build import build_image
from openenv.deploy.run import start_container
from openenv.deploy.scaffold import scaffold
from openenv.runtime.codec import message_class

TIMEOUT = 60.0
NAME = "scaffold_probe_env"


def _cli(
    *args: str, timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("init")
    r = _cli("init", NAME, "--dir", str(parent), timeout=120)
    assert r.returncode == 0, r.stderr
    root = parent / NAME
    assert f"created {root}" in r.stdout
    return root


def test_init_layout_and_refusals(scaffolded: Path, tmp_path: Path) -> None:
    files = {
        str(p.relative_to(scaffolded)) for p in scaffolded.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    assert {
        "pyproject.toml",
        "README.md",
        f"proto/{NAME}/v1/{NAME}.proto",
        f"src/{NAME}/__init__.py",
        f"src/{NAME}/server.py",
        f"src/{NAME}/client.py",
        f"src/{NAME}/v1/{NAME}_pb2.py",
        f"src/{NAME}/v1/{NAME}_pb2.pyi",
        f"tests/test_{NAME}.py",
    } <= files
    assert not any("{{" in (scaffolded / f).read_text() for f in files if not f.endswith(".pyc"))
    again = _cli("init", NAME, "--dir", str(scaffolded.parent), timeout=60)
    assert again.returncode == 1 and "exists and is not empty" in again.stderr
    bad = _cli("init", "Not-A name", "--dir", str(tmp_path), timeout=60)
    assert bad.returncode == 1 and "not a usable environment name" in bad.stderr
    with pytest.raises(openenv.FailedPrecondition, match="already importable"):
        scaffold("json", tmp_path)


def test_scaffolded_tests_pass(scaffolded: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(scaffolded / "src")}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(scaffolded / "tests")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=scaffolded,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed" in r.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_init_build_run_certify(scaffolded: Path, engine: Any, base_image: str, managed_names: set[str]) -> None:
    result = build_image(
        scaffolded,
        tag="openenv-scaffold-probe-env:pytest",
        base_image=base_image,
        offline=True,
        constraints=Path(__file__).resolve().parents[3] / "requirements" / "dev.txt",
        engine=engine,
        echo=lambda m: None,
    )
    labels = engine.images.get(result.tag).labels
    assert labels["openenv.factory"] == f"{NAME}.server:ScaffoldProbeEnvEnvironment"

    # An episode against the container, with the generic client (no stubs of the new env here).
    with start_container(result.tag) as c:
        managed_names.add(c.name)

        async def play() -> None:
            async with openenv.EnvClient(c.url, token=c.token) as env:
                assert env.info is not None and env.info.name == NAME
                r = await env.reset(seed=3)
                low, high = 1, 100
                while not r.done:
                    guess = (low + high) // 2
                    action = message_class(env.info.descriptors, env.info.action.message_type)(guess=guess)
                    r = await env.step(action)
                    hint = r.observation.hint
                    low, high = (guess + 1, high) if hint == 1 else (low, guess - 1) if hint == 2 else (low, high)
                assert r.terminated and r.reward == 1.0

        asyncio.run(asyncio.wait_for(play(), TIMEOUT))
    assert c.exit_code == 0

    if importlib.util.find_spec("openenv_conformance.cli") is None:
        pytest.skip("openenv certify (openenv-conformance) is not installed: certification not run")
    # 25 examples per property, as the reference environments' modules are certified in tests:
    # the suite's default (100) was over a minute more of CI, for a deterministic scaffold.
    r = _cli("certify", f"docker:{result.tag}", "--max-examples", "25", timeout=900)
    assert r.returncode == 0, f"certify failed:\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}"
