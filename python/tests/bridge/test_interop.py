"""Interop with the real OpenEnv releases from PyPI, each in its own cached venv
(``tools/openenv_upstream.py``), never mixed with ours:

(a) OpenEnv's stock clients (generic and MCP tool client, async and sync) against our bridge;
(b) an environment written against OpenEnv's server API, served by OpenEnv, driven by our
    ``EnvClient``;
(c) ``openenv validate --url`` against our bridge;
(d) the upstream venv's official MCP client (``mcp`` 1.x) against our ``/mcp``
    (the ``mcp`` 2.x client of our venv is in ``test_mcp.py``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bridge_envs import BenchCounter
from bridge_kit import UPSTREAM, openenv_serve, run_upstream, upstream_env, upstream_python, upstream_server

import openenv
from echo_env import EchoEnv
from openenv import CallToolAction

pytestmark = [pytest.mark.interop, pytest.mark.slow]

RELEASES = [pytest.param(d, v, id=f"{d}-{v}") for d, v in UPSTREAM]


@pytest.mark.parametrize(("dist", "version"), RELEASES)
def test_a_stock_clients_against_our_bridge(dist: str, version: str, tmp_path: Path) -> None:
    py = upstream_python(dist, version)
    # The three servers at once, and every scenario in one process of the stock package (its
    # imports take seconds: a process per scenario was most of this test's time).
    with (
        openenv_serve("bridge_envs:BenchCounter", tmp_path) as (_, counter, _p),
        openenv_serve("echo_env.server:EchoEnvironment", tmp_path) as (_, echo, _p2),
        openenv_serve("bridge_envs:BenchCounter", tmp_path, "--max-sessions", "1") as (_, single, _p3),
    ):
        seen = run_upstream(
            py,
            "upstream_clients.py",
            *("generic_async", counter, "generic_sync", counter, "strict", counter),
            *("mcp_async", echo, "mcp_sync", echo, "capacity", single),
            timeout=300.0,  # six scenarios in one process, on a loaded machine
        )
    for scenario in ("generic_async", "generic_sync"):
        out = seen[scenario]
        assert out["reset"]["observation"]["value"] == 0 and out["reset"]["reward"] is None
        assert out["step1"]["observation"]["value"] == 2 and out["step1"]["reward"] == 2.0
        assert out["step1"]["reward_type"] == "float"
        assert out["step2"]["observation"]["value"] == 5 and out["step2"]["done"] is False
        assert out["step2"]["observation"]["metadata"] == {"step": 2}, "metadata reaches stock clients"
        assert out["state"]["step_count"] == 2 and out["state"]["value"] == 5
        if scenario == "generic_async":
            assert "VALIDATION_ERROR" in out["bad_action_error"]
            assert out["after_error"]["observation"]["value"] == 6
    out = seen["strict"]
    for label, error in out["errors"].items():  # RFC 0007: no coercion, no unknown fields
        assert "VALIDATION_ERROR" in error, (label, error)
    assert "dleta" in out["errors"]["misspelled"] and "extra" in out["errors"]["unknown"]
    assert out["after"]["observation"]["value"] == 2, "refused actions changed nothing"
    out = seen["mcp_async"]
    assert out["tools"] == ["echo_message", "echo_with_length"]
    assert out["schema"]["required"] == ["message"]
    assert out["echo"] == "Hello" and out["length"] == {"message": "abcd", "length": 4}
    assert out["step"]["observation"]["result"]["data"] == {"message": "hey", "length": 3}
    assert out["step"]["reward"] == pytest.approx(0.3)
    assert "no_such_tool" in out["unknown_tool_error"]
    out = seen["mcp_sync"]
    assert out["echo"] == "Hello sync" and out["length"]["length"] == 4
    out = seen["capacity"]
    assert "CAPACITY_REACHED" in out["second_error"]
    assert out["first_still_works"]["observation"]["value"] == 1


@pytest.mark.anyio
@pytest.mark.parametrize(("dist", "version"), RELEASES)
async def test_b_our_client_against_stock_openenv_servers(dist: str, version: str, tmp_path: Path) -> None:
    py = upstream_python(dist, version)
    release = tmp_path / "release-held-steps"  # its existence ends the step held below
    with upstream_server(
        py, "upstream_envs:counter_app", tmp_path, MAX_CONCURRENT_ENVS="2", COUNTER_RELEASE_FILE=str(release)
    ) as url:
        async with openenv.EnvClient(url) as env:
            assert env.info.name and env.info.action.json_schema  # from /metadata and /schema
            r = await env.reset(seed=5, episode_id="ep-1")
            assert r.observation == {"value": 0} and r.reward is None and r.episode_id == "ep-1"
            r = await env.step({"delta": 2})
            assert r.observation == {"value": 2} and r.reward == 2.0 and r.step_count == 1
            if version == "0.10.0":
                assert r.metadata == {"step": 1}, "0.10 sends metadata; 0.3 drops it"
            st = await env.state()
            assert st.episode_id == "ep-1" and st.step_count == 1 and st.state == {"value": 2}
            with pytest.raises(openenv.InvalidArgument):
                await env.step({"delta": "x"})
            assert (await env.step({"delta": 1})).observation == {"value": 3}
            with pytest.raises(openenv.Unimplemented):
                await env.step({"delta": 1}, step_timeout=1.0)
        # a client-side timeout against a stock server drops the connection: no reply can shift
        try:
            async with openenv.EnvClient(url) as env:
                await env.reset()
                with pytest.raises(openenv.DeadlineExceeded) as e:  # the step sleeps an hour unless
                    await env.step({"delta": 1, "sleep": 3600}, timeout=0.2)  # released: the timeout ends it
                assert e.value.fatal
                with pytest.raises(openenv.EnvError):
                    await env.step({"delta": 1})
        finally:
            release.touch()  # let the held step end before the server is stopped
    with upstream_server(py, "upstream_envs:echo_app", tmp_path) as url:
        async with EchoEnv(url) as env:
            r = await env.reset()
            r = await env.step(CallToolAction("echo_with_length", {"message": "hey"}))
            assert r.observation.tool_name == "echo_with_length"
            assert r.observation.result.data == {"message": "hey", "length": 3}
            assert sorted(t.name for t in await env.list_tools()) == ["echo_message", "echo_with_length"]
            assert (await env.call_tool("echo_message", {"message": "yo"})).data == "yo"
            with pytest.raises(openenv.NotFound):
                await env.step(CallToolAction("nope", {}))

        def sync_client() -> object:
            with EchoEnv(url).sync() as env:
                env.reset()
                return env.step(CallToolAction("echo_message", {"message": "s"})).observation.result.data

        import asyncio

        assert await asyncio.to_thread(sync_client) == "s"


@pytest.mark.parametrize(("dist", "version"), RELEASES[:1])
def test_c_openenv_validate_passes_against_our_bridge(dist: str, version: str, tmp_path: Path) -> None:
    py = upstream_python(dist, version)
    for target in ("echo_env.server:EchoEnvironment", "bridge_envs:BenchCounter"):
        with openenv_serve(target, tmp_path) as (_, url, _p):
            proc = subprocess.run(
                [str(py.parent / "openenv"), "validate", "--url", url, "--json"],
                env=upstream_env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            import json

            report = json.loads(proc.stdout)
            assert report["passed"] is True and report["summary"]["passed_count"] == report["summary"]["total_count"]


@pytest.mark.parametrize(("dist", "version"), RELEASES[:1])
def test_d_upstream_official_mcp_client(dist: str, version: str, tmp_path: Path) -> None:
    py = upstream_python(dist, version)
    with openenv_serve("echo_env.server:EchoEnvironment", tmp_path) as (_, url, _p):
        out = run_upstream(py, "upstream_mcp_client.py", url + "/mcp")
    assert out["server"] == "echo_env" and out["tools"] == ["echo_message", "echo_with_length"]
    assert out["structured"] == {"message": "mcp", "length": 3} and out["is_error"] is False
    assert out["text"] == "x"


def test_bench_counter_is_the_same_env() -> None:
    """The benchmark's two counters agree (ours here; OpenEnv's in upstream_envs.py)."""
    env = BenchCounter()
    env.reset(seed=1)
    r = env.step(type(env).action_type(delta=2))
    assert r.observation.value == 2 and r.reward == 2.0
