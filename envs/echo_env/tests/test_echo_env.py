"""The echo reference environment over a real gRPC server on loopback: the quick start
(async and blocking), both tools, side calls and the error answers.

One server process per module (``openenv serve echo_env.server:EchoEnvironment --port 0``);
every test opens its own sessions.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import openenv
from echo_env import CallToolAction, EchoEnv

TIMEOUT = 30.0  # bound on every test's client work


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An echo server started with ``openenv serve``, stopped with SIGTERM."""
    tmp = tmp_path_factory.mktemp("echo_env")
    ready, log = tmp / "address", tmp / "server.log"
    script = Path(sys.executable).parent / "openenv"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "openenv.cli"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *cmd,
                "serve",
                "echo_env.server:EchoEnvironment",
                "--port",
                "0",
                "--ready-file",
                str(ready),
                "--grace",
                "2",
            ],
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"openenv serve did not start (exit {proc.poll()}):\n{log.read_text()}")
            time.sleep(0.05)
        yield ready.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


# --------------------------------------------------------------------------- quick start


def test_quick_start_async(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    URL = url  # noqa: N806 - the quick start's spelling

    async def quick_start() -> None:
        async with EchoEnv(base_url=URL) as client:
            result = await client.reset()
            print(result.observation.metadata["message"])
            result = await client.step(CallToolAction(tool_name="echo_message", arguments={"message": "Hello, World!"}))
            print(result.observation.result["data"])
            print(result.reward)

            assert result.reward == pytest.approx(1.3)
            assert result.step_count == 1 and not result.done
            assert result.observation.tool_name == "echo_message"
            assert result.observation.result.is_error is False

    run(quick_start())
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["Echo environment ready!", "Hello, World!"]
    assert float(lines[2]) == pytest.approx(1.3)


def test_quick_start_sync(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    URL = url  # noqa: N806 - the quick start's spelling
    with EchoEnv(base_url=URL, timeout=10.0).sync() as client:
        result = client.reset()
        print(result.observation.metadata["message"])
        result = client.step(CallToolAction(tool_name="echo_message", arguments={"message": "Hello, World!"}))
        print(result.observation.result["data"])
        print(result.reward)
        assert result.reward == pytest.approx(1.3)
        assert client.state().step_count == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["Echo environment ready!", "Hello, World!"]
    assert float(lines[2]) == pytest.approx(1.3)


# --------------------------------------------------------------------------- tools


def test_echo_with_length_returns_structured_data(url: str) -> None:
    async def go() -> None:
        async with EchoEnv(url, timeout=10.0) as env:
            await env.reset()
            r = await env.step(CallToolAction("echo_with_length", {"message": "openenv"}))
            res = r.observation.result
            assert res["data"] == {"message": "openenv", "length": 7}
            assert res.structured_content == {"message": "openenv", "length": 7}
            assert r.reward == pytest.approx(0.7)
            st = await env.state()
            assert st.step_count == 1 and st.state == {"echoed": 1}

    run(go())


def test_list_tools(url: str) -> None:
    async def go() -> None:
        async with EchoEnv(url, timeout=10.0) as env:
            tools = {t.name: t for t in await env.list_tools()}
        assert set(tools) == {"echo_message", "echo_with_length"}
        for t in tools.values():
            assert t.description
            assert t.input_schema["type"] == "object"
            assert t.input_schema["required"] == ["message"]
            assert t.input_schema["properties"]["message"]["type"] == "string"

    run(go())


def test_call_tool_is_a_side_call_not_a_step(url: str) -> None:
    async def go() -> None:
        async with EchoEnv(url, timeout=10.0) as env:
            res = await env.call_tool("echo_message", {"message": "before reset"})  # allowed in any status
            assert res.data == "before reset" and not res.is_error
            await env.reset()
            await env.step(CallToolAction("echo_message", {"message": "a step"}))
            res = await env.call_tool("echo_with_length", {"message": "side"})
            assert res.data == {"message": "side", "length": 4}
            st = await env.state()
            assert st.step_count == 1  # only the step counted
            assert st.status is openenv.EpisodeStatus.RUNNING

    run(go())


def test_unknown_tool_is_not_found(url: str) -> None:
    async def go() -> None:
        async with EchoEnv(url, timeout=10.0) as env:
            await env.reset()
            with pytest.raises(openenv.NotFound) as err:
                await env.call_tool("no_such_tool", {"message": "x"})
            assert err.value.code is openenv.ErrorCode.NOT_FOUND and not err.value.fatal
            with pytest.raises(openenv.NotFound):
                await env.step(CallToolAction("no_such_tool", {"message": "x"}))
            assert (await env.state()).step_count == 0  # the failed step was not counted
            r = await env.step(CallToolAction("echo_message", {"message": "still here"}))
            assert r.observation.result["data"] == "still here" and r.step_count == 1

    run(go())


def test_invalid_arguments_are_invalid_argument(url: str) -> None:
    async def go() -> None:
        async with EchoEnv(url, timeout=10.0) as env:
            await env.reset()
            for args in ({}, {"message": ["not", "a", "string"]}, {"message": "x", "extra": 1}):
                with pytest.raises(openenv.InvalidArgument) as err:
                    await env.call_tool("echo_message", args)
                assert err.value.code is openenv.ErrorCode.INVALID_ARGUMENT and not err.value.fatal
            with pytest.raises(openenv.InvalidArgument):
                await env.step(CallToolAction("echo_with_length", {}))
            assert (await env.state()).step_count == 0
            assert (await env.call_tool("echo_message", {"message": "ok"})).data == "ok"

    run(go())
