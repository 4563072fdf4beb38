"""The catalog and its commands, as a user runs them: `openenv catalog` lists at least 150
environments from entry points, `openenv import` describes one, `openenv serve import:...`
serves one over real sockets, and docs/catalog.md is what `openenv catalog markdown` prints.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import openenv
from openenv_catalog import entries
from openenv_catalog.cli import markdown
from openenv_catalog.registry import WORK_KINDS

REPO = Path(__file__).resolve().parents[2]


def _openenv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_the_catalog_lists_at_least_150_environments_native_and_imported() -> None:
    items = entries()
    names = [e.name for e in items]
    assert len(items) >= 150 and len(set(names)) == len(names)
    assert {"echo_env", "gridworld", "math_env", "coding_env"} <= set(names)
    sources = {e.source.split(":")[0] for e in items if e.kind != "native"}
    assert {"gymnasium", "reasoning_gym", "textarena"} <= sources
    assert sum(e.source.startswith("reasoning_gym:") for e in items) >= 20


def test_openenv_catalog_prints_every_entry_and_the_count() -> None:
    r = _openenv("catalog", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert {e["name"] for e in listed} == {e.name for e in entries()}
    assert all({"name", "kind", "source", "target", "tools", "tasks", "certified"} <= set(e) for e in listed)


def test_every_catalog_entry_is_recorded_as_certified() -> None:
    missing = [e.name for e in entries() if not e.certified]
    assert not missing, f"not certified (run `openenv catalog certify --write`): {missing}"


def test_docs_catalog_is_generated_from_the_catalog() -> None:
    assert (REPO / "docs" / "catalog.md").read_text() == markdown(entries())


def test_catalog_certify_skips_what_it_is_told_to() -> None:
    """CI certifies the native environments as images and skips them here (.ci/run): --skip
    removes names from what --only selects, and an empty selection is an error, not a pass."""
    r = _openenv("catalog", "certify", "--only", "gymnasium-cartpole-*", "--skip", "gymnasium-cart*")
    assert r.returncode != 0 and "skipping 1 " in r.stdout and "no catalog environment matches" in r.stderr, r


def test_openenv_import_describes_an_environment_and_rejects_unknown_ones() -> None:
    r = _openenv("import", "gymnasium:CartPole-v1")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["name"] == "gymnasium-cartpole-v1" and info["serve"] == "openenv serve import:gymnasium:CartPole-v1"
    # The declared types as JSON values, not Python reprs inside strings.
    assert info["action_type"] == {"type": "integer", "minimum": 0, "maximum": 1}
    tensor = info["observation_type"]["tensor"]  # per-dimension bounds, null where unbounded (RFC 0014)
    assert tensor["dtype"] == "float32" and tensor["shape"] == [4]
    assert tensor["minimum"][1] is None and tensor["maximum"][0] == pytest.approx(4.8)
    bad = _openenv("import", "gymnasium:NoSuchEnv-v9")
    assert bad.returncode != 0 and "NoSuchEnv-v9" in bad.stderr
    nosource = _openenv("import", "nosuch:thing")
    assert nosource.returncode != 0 and "no importer 'nosuch'" in nosource.stderr
    vf = _openenv("import", "verifiers:gsm8k")
    assert vf.returncode != 0 and "mcp" in vf.stderr


SERVE = [sys.executable, "-m", "openenv.cli", "serve", "import:gymnasium:CartPole-v1", "--port", "0", "--no-http"]


def test_openenv_serve_import_is_a_one_liner() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        proc = subprocess.Popen(
            [*SERVE, "--ready-file", ready],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(ready):
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the server did not become ready"
                time.sleep(0.1)
            address = Path(ready).read_text().strip()

            async def go() -> openenv.StepResult:
                async with openenv.EnvClient(address) as env:
                    await env.reset(seed=0)
                    return await env.step(0)

            r = asyncio.run(asyncio.wait_for(go(), 60))
            assert r.reward == 1.0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


@pytest.mark.parametrize("spec", ["import:gymnasium", "import:gymnasium:"])
def test_a_malformed_import_target_is_a_clear_error(spec: str) -> None:
    r = _openenv("serve", spec, "--port", "0", "--no-http")
    assert r.returncode != 0 and "import:gymnasium:ID" in r.stderr


def test_every_entry_says_its_kind_of_work_and_the_agentic_sets_lead_the_docs() -> None:
    """Issue 48: a user picks by kind of work. Every entry has one of the five; the agentic ones
    are the multi-step environments with tools (terminal, repository, browser, SQL, coding,
    Harbor tasks), reasoning-gym is reasoning, TextArena games, Gymnasium control; and
    docs/catalog.md's first section after the introduction is the agentic one, with the
    terminal environment's baselines linked."""
    items = entries()
    assert all(e.work in WORK_KINDS for e in items), [(e.name, e.work) for e in items if e.work not in WORK_KINDS]
    work = {e.name: e.work for e in items}
    agentic = {n for n, w in work.items() if w == "agentic"}
    assert {"terminal_env", "repo_env", "coding_env", "harbor_env", "sql_env", "browser_env"} <= agentic
    assert not {n for n in agentic if n.startswith(("reasoning-gym-", "textarena-", "gymnasium-"))}
    assert work["math_env"] == "reasoning" and work["echo_env"] == "demo" and work["wordle"] == "game"
    assert {w for e in items if e.importer == "reasoning_gym" for w in [e.work]} == {"reasoning"}
    assert {w for e in items if e.importer == "textarena" for w in [e.work]} == {"game"}
    assert {w for e in items if e.importer == "gymnasium" for w in [e.work]} == {"control"}
    text = markdown(items)
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0].startswith("## Agentic, multi-step"), sections
    agentic_part = text.split("## Agentic, multi-step", 1)[1].split("\n## ", 1)[0]
    assert "| terminal_env | terminal |" in agentic_part
    assert "[baselines](../envs/terminal_env/README.md#baselines)" in agentic_part


def test_openenv_catalog_work_lists_one_kind_of_work() -> None:
    """`openenv catalog --work agentic` lists the agentic entries only, in JSON with their kind
    of work; an unknown kind of work is refused, naming the choices."""
    r = _openenv("catalog", "--work", "agentic", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert listed and {e["work"] for e in listed} == {"agentic"}
    assert {e["name"] for e in listed} == {e.name for e in entries() if e.work == "agentic"}
    bad = _openenv("catalog", "--work", "cooking")
    assert bad.returncode == 2 and "agentic" in bad.stderr, bad.stderr
