"""OpenEnv's stock clients driving a server, run inside the upstream OpenEnv venv.

``python upstream_clients.py SCENARIO BASE_URL [SCENARIO BASE_URL ...]`` prints one JSON object
with what the client saw in each scenario; the interop tests (``test_interop.py``) assert on it. Works with ``openenv``
0.10.0 and ``openenv-core`` 0.3.0 (same import package).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient


def _sr(r: Any) -> dict[str, Any]:
    obs = r.observation
    if hasattr(obs, "model_dump"):
        obs = obs.model_dump(mode="json")
    return {
        "observation": obs,
        "reward": r.reward,
        "reward_type": type(r.reward).__name__,
        "done": r.done,
        "metadata": getattr(r, "metadata", None),
    }


def _state(s: Any) -> Any:
    return s.model_dump(mode="json") if hasattr(s, "model_dump") else s


async def generic_async(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=url) as env:
        out["reset"] = _sr(await env.reset(seed=3))
        out["step1"] = _sr(await env.step({"delta": 2}))
        out["step2"] = _sr(await env.step({"delta": 3}))
        out["state"] = _state(await env.state())
        try:
            await env.step({"delta": "not a number"})
        except RuntimeError as e:
            out["bad_action_error"] = str(e)
        out["after_error"] = _sr(await env.step({"delta": 1}))
    return out


def generic_sync(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=url).sync() as env:
        out["reset"] = _sr(env.reset(seed=3))
        out["step1"] = _sr(env.step({"delta": 2}))
        out["step2"] = _sr(env.step({"delta": 3}))
        out["state"] = _state(env.state())
    return out


async def mcp_async(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with MCPToolClient(base_url=url) as env:
        out["reset"] = _sr(await env.reset())
        tools = await env.list_tools()
        out["tools"] = sorted(t.name for t in tools)
        out["schema"] = next(t.input_schema for t in tools if t.name == "echo_message")
        out["echo"] = await env.call_tool("echo_message", message="Hello")
        out["length"] = await env.call_tool("echo_with_length", message="abcd")
        r = await env.step(CallToolAction(tool_name="echo_with_length", arguments={"message": "hey"}))
        out["step"] = _sr(r)
        try:
            await env.call_tool("no_such_tool", x=1)
        except RuntimeError as e:
            out["unknown_tool_error"] = str(e)
        out["state"] = _state(await env.state())
    return out


def mcp_sync(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with MCPToolClient(base_url=url).sync() as env:
        out["reset"] = _sr(env.reset())
        out["tools"] = sorted(t.name for t in env.list_tools())
        out["echo"] = env.call_tool("echo_message", message="Hello sync")
        out["length"] = env.call_tool("echo_with_length", message="abcd")
    return out


async def capacity(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=url) as first:
        await first.reset()
        second = GenericEnvClient(base_url=url)
        try:
            await second.connect()
            await second.reset()
            out["second"] = "accepted"
        except Exception as e:  # noqa: BLE001 - what the stock client raises is the result
            out["second_error"] = f"{type(e).__name__}: {e}"
        finally:
            try:
                await second.close()
            except Exception:  # noqa: BLE001
                pass
        out["first_still_works"] = _sr(await first.step({"delta": 1}))
    return out


async def strict(url: str) -> dict[str, Any]:
    """Actions that are not exactly of the advertised type (RFC 0007): each is refused."""
    out: dict[str, Any] = {"errors": {}}
    async with GenericEnvClient(base_url=url) as env:
        await env.reset()
        for label, action in (
            ("string", {"delta": "7"}),
            ("bool", {"delta": True}),
            ("misspelled", {"dleta": 2}),
            ("unknown", {"delta": 2, "extra": 1}),
        ):
            try:
                r = await env.step(action)
                out["errors"][label] = f"accepted: {_sr(r)}"
            except RuntimeError as e:
                out["errors"][label] = str(e)
        out["after"] = _sr(await env.step({"delta": 2}))
    return out


SCENARIOS = {
    "strict": strict,
    "generic_async": generic_async,
    "generic_sync": generic_sync,
    "mcp_async": mcp_async,
    "mcp_sync": mcp_sync,
    "capacity": capacity,
}


def main() -> None:
    """``SCENARIO URL [SCENARIO URL ...]``: each scenario in turn, in this one process (the
    stock package's imports cost seconds); prints ``{scenario: what the client saw}``."""
    args = sys.argv[1:]
    if not args or len(args) % 2:
        raise SystemExit("usage: upstream_clients.py SCENARIO URL [SCENARIO URL ...]")
    results: dict[str, Any] = {}
    for scenario, url in zip(args[::2], args[1::2], strict=True):
        fn = SCENARIOS[scenario]
        results[scenario] = asyncio.run(fn(url)) if asyncio.iscoroutinefunction(fn) else fn(url)
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
