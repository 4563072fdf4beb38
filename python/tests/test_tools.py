"""Tools over gRPC: descriptors from type hints and docstrings, argument validation,
results (content, structured content, is_error), async tools, timeouts, tool actions in
step, reserved names, and tools-only (production) mode. Every call goes through a real
``openenv.Server`` on 127.0.0.1 and an ``openenv.EnvClient``.

The docs/tools.md examples are run as a script at the end.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Literal

import pytest
from openenv_testkit import running

import openenv
from openenv import CallToolAction, CallToolObservation, ToolResult

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
PNG = b"\x89PNG\r\n\x1a\n fake image bytes"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class ToolBox(openenv.Environment):
    """An environment with every kind of tool; steps are tool calls (the default step)."""

    run_in_thread = True
    release = threading.Event()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> CallToolObservation:
        self.calls = 0
        return CallToolObservation()

    @openenv.tool(annotations={"readOnlyHint": True, "title": "Add"})
    def add(self, a: int, b: int = 2) -> int:
        """Add two integers.

        The second paragraph is not part of the description.

        Args:
            a: the first term.
            b: the second term,
                two by default.
        """
        return a + b

    @openenv.tool
    def describe(
        self, shape: Literal["circle", "square"], size: float | None = None, tags: list[str] | None = None
    ) -> dict[str, Any]:
        """Describe a shape.

        Args:
            shape: which shape.
            size: its size, if known.
            tags: free labels.
        """
        return {"shape": shape, "size": size, "tags": tags or []}

    @openenv.tool
    def point(self, x: int, y: int) -> Point:
        """Make a point."""
        return Point(x, y)

    @openenv.tool
    async def async_echo(self, text: str) -> str:
        """Echo text, asynchronously."""
        await asyncio.sleep(0)
        return text

    @openenv.tool(timeout_s=0.2)
    async def hang(self) -> str:
        """Never finishes on its own (bounded by its 0.2 s timeout)."""
        await asyncio.sleep(3600)
        return "unreachable"

    @openenv.tool
    async def slow(self, seconds: float) -> str:
        """Sleep for a while."""
        await asyncio.sleep(seconds)
        return "done"

    @openenv.tool
    def blocking(self) -> str:
        """Blocks a worker thread until the test releases it (at most 10 s)."""
        ToolBox.release.wait(10)
        return "released"

    @openenv.tool
    def boom(self, message: str) -> str:
        """Always fails."""
        raise ValueError(message)

    @openenv.tool
    def reject(self) -> str:
        """Refuses the call as an invalid action."""
        raise openenv.InvalidAction("not now")

    @openenv.tool
    def picture(self) -> ToolResult:
        """Returns an image and a resource."""
        return ToolResult(
            [
                {"type": "text", "text": "a picture"},
                {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
                {
                    "type": "resource",
                    "resource": {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "notes"},
                },
            ],
            {"width": 1, "height": 1},
        )


class Finisher(openenv.Environment):
    """A tool environment whose ``done`` tool ends the episode."""

    @openenv.tool
    def done(self) -> str:
        """Finish."""
        return "bye"

    @openenv.tool
    def noop(self) -> None:
        """Nothing."""

    def finish_tool_step(self, action: CallToolAction, observation: CallToolObservation) -> openenv.StepResult:
        return openenv.StepResult(
            observation,
            reward=1.0 if action.tool_name == "done" else 0.0,
            terminated=action.tool_name == "done",
            metadata={"tool": action.tool_name},
        )


class NoTools(openenv.Environment):
    """An environment without tools."""

    def step(self, action: Any) -> Any:
        return action


class ToolClient(openenv.EnvClient):
    action_type = CallToolAction
    observation_type = CallToolObservation


@pytest.fixture(autouse=True)
def _released() -> Any:
    ToolBox.release.clear()
    yield
    ToolBox.release.set()  # never leave a worker thread waiting


async def _client(srv: openenv.Server, **kw: Any) -> ToolClient:
    return await asyncio.wait_for(ToolClient(srv.address, timeout=WAIT_S, **kw).connect(), WAIT_S)


# --------------------------------------------------------------------------- descriptors


async def test_schema_from_hints_and_docstring() -> None:
    async with running(ToolBox) as srv:
        env = await _client(srv)
        try:
            assert env.info.capabilities.tools and not env.info.capabilities.tools_only
            tools = {t.name: t for t in await env.list_tools()}
        finally:
            await env.close()
    assert list(tools) == [
        "add",
        "describe",
        "point",
        "async_echo",
        "hang",
        "slow",
        "blocking",
        "boom",
        "reject",
        "picture",
    ]
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "required": ["a"],
        "properties": {
            "a": {"type": "integer", "description": "the first term."},
            "b": {"type": "integer", "default": 2, "description": "the second term, two by default."},
        },
    }
    assert add.output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    assert add.annotations == {"readOnlyHint": True, "title": "Add"}
    desc = tools["describe"].input_schema
    assert desc["required"] == ["shape"]
    assert desc["properties"]["shape"]["enum"] == ["circle", "square"]
    assert desc["properties"]["size"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert desc["properties"]["tags"]["description"] == "free labels."
    assert tools["describe"].output_schema == {"type": "object", "additionalProperties": True}
    assert tools["point"].output_schema == {
        "type": "object",
        "required": ["x", "y"],
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    }
    assert tools["picture"].output_schema is None  # a ToolResult: no declared structure
    assert tools["hang"].annotations is None


async def test_tool_list_is_stable() -> None:
    async with running(ToolBox) as srv:
        a, b = await _client(srv), await _client(srv)
        try:
            first = await a.list_tools()
            await a.reset()
            await a.step(CallToolAction("add", {"a": 1}))
            assert await a.list_tools() == first
            assert await b.list_tools() == first
        finally:
            await a.close()
            await b.close()


@pytest.mark.parametrize("name", ["reset", "step", "state", "close"])
def test_reserved_names_refused_at_class_definition(name: str) -> None:
    with pytest.raises(ValueError, match="reserved"):

        class Bad(openenv.Environment):
            @openenv.tool(name=name)
            def anything(self) -> str:
                return ""

    with pytest.raises(ValueError, match="reserved"):
        exec(
            f"class Bad2(openenv.Environment):\n    @openenv.tool\n    def {name}(self): return ''\n",
            {"openenv": openenv},
        )


def test_unusable_signatures_refused() -> None:
    with pytest.raises(ValueError, match="must match"):

        class BadName(openenv.Environment):
            @openenv.tool(name="has space")
            def f(self) -> str:
                return ""

    with pytest.raises(TypeError, match=r"\*args"):

        class Star(openenv.Environment):
            @openenv.tool
            def f(self, *args: int) -> str:
                return ""


# --------------------------------------------------------------------------- calls


async def test_results_content_and_structure() -> None:
    async with running(ToolBox) as srv:
        env = await _client(srv)
        try:
            r = await env.call_tool("add", {"a": 40})
            assert (r.is_error, r.data, r.structured_content, r.text) == (False, 42, {"result": 42}, "42")
            r = await env.call_tool("describe", {"shape": "circle", "size": 1.5})
            assert r.structured_content == {"shape": "circle", "size": 1.5, "tags": []}
            assert (await env.call_tool("point", {"x": 1, "y": 2})).structured_content == {"x": 1, "y": 2}
            assert (await env.call_tool("async_echo", {"text": "hi"})).data == "hi"
            pic = await env.call_tool("picture")
            assert [c["type"] for c in pic.content] == ["text", "image", "resource"]
            assert base64.b64decode(pic.content[1]["data"]) == PNG and pic.content[1]["mimeType"] == "image/png"
            assert pic.content[2]["resource"] == {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "notes"}
            assert pic.structured_content == {"width": 1, "height": 1}
        finally:
            await env.close()


async def test_tool_raising_is_an_error_result() -> None:
    async with running(ToolBox) as srv:
        env = await _client(srv)
        try:
            r = await env.call_tool("boom", {"message": "kaput"})
            assert r.is_error and r.text == "ValueError: kaput" and r.structured_content is None
            with pytest.raises(openenv.InvalidArgument, match="not now"):  # InvalidAction: a protocol error
                await env.call_tool("reject")
            assert (await env.call_tool("add", {"a": 1})).data == 3  # the session is fine
        finally:
            await env.close()


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({}, "a"),  # missing required
        ({"a": "forty"}, "a"),  # wrong type
        ({"a": 1, "c": 3}, "c"),  # not in the schema
        ({"a": 1.5}, "a"),  # not an integer
        ({"a": "40"}, "a"),  # a numeric string is still not an integer (no coercion)
    ],
)
async def test_invalid_arguments(arguments: dict[str, Any], where: str) -> None:
    async with running(ToolBox) as srv:
        env = await _client(srv)
        try:
            with pytest.raises(openenv.InvalidArgument) as ei:
                await env.call_tool("add", arguments)
            assert ei.value.code == openenv.ErrorCode.INVALID_ARGUMENT and not ei.value.fatal
            assert re.search(rf"invalid argument {where}\b", ei.value.message), ei.value.message
            assert ei.value.details  # the validation errors travel in Status.details
            with pytest.raises(openenv.InvalidArgument):
                await env.call_tool("describe", {"shape": "triangle"})
            with pytest.raises(openenv.NotFound, match="unknown tool 'nope'"):
                await env.call_tool("nope")
            assert (await env.call_tool("add", {"a": 1})).data == 3
        finally:
            await env.close()


# --------------------------------------------------------------------------- timeouts


async def test_tool_timeouts_are_deadline_exceeded() -> None:
    async with running(ToolBox) as srv:
        env = await _client(srv)
        try:
            await env.reset()
            with pytest.raises(openenv.DeadlineExceeded, match="tool 'hang'"):  # the tool's own timeout_s
                await env.call_tool("hang")
            with pytest.raises(openenv.DeadlineExceeded):  # the request's timeout
                await env.call_tool("slow", {"seconds": 3600}, tool_timeout=0.2)
            assert (await env.call_tool("slow", {"seconds": 0}, tool_timeout=WAIT_S)).data == "done"
            st = await env.state()  # side calls never touch the episode
            assert st.status is openenv.EpisodeStatus.RUNNING and st.step_count == 0
            with pytest.raises(openenv.DeadlineExceeded):  # as a step: the episode is aborted
                await env.step(CallToolAction("slow", {"seconds": 3600}, timeout_s=0.2))
            st = await env.state()
            assert st.status is openenv.EpisodeStatus.ABORTED and st.step_count == 0
        finally:
            await env.close()


async def test_sync_tool_timeout_in_worker_thread() -> None:
    async with running(ToolBox) as srv:
        env = await _client(srv)
        try:
            with pytest.raises(openenv.DeadlineExceeded):
                await env.call_tool("blocking", tool_timeout=0.2)
            ToolBox.release.set()  # the straggler finishes; the next call waits for it, never overlaps
            assert (await env.call_tool("add", {"a": 0})).data == 2
        finally:
            await env.close()


# --------------------------------------------------------------------------- tool actions in step


async def test_tool_calls_as_step_actions() -> None:
    async with running(Finisher) as srv:
        env = await _client(srv)
        try:
            assert env.info.action.message_type == "openenv.v1.CallToolRequest"
            assert env.info.observation.message_type == "openenv.v1.CallToolResponse"
            await env.reset()
            r = await env.step(CallToolAction("noop"))
            assert r.step_count == 1 and r.reward == 0.0 and not r.done and r.metadata == {"tool": "noop"}
            assert r.observation.tool_name == "noop" and r.observation.result.structured_content == {"result": None}
            with pytest.raises(openenv.NotFound):
                await env.step(CallToolAction("missing"))
            with pytest.raises(openenv.InvalidArgument):
                await env.step(CallToolAction("noop", {"extra": 1}))
            r = await env.step(CallToolAction("done"))
            assert r.terminated and r.reward == 1.0 and r.step_count == 2
            assert r.observation.result.data == "bye"
        finally:
            await env.close()


async def test_environment_without_tools() -> None:
    async with running(NoTools) as srv:
        env = await _client(srv)
        try:
            assert not env.info.capabilities.tools
            with pytest.raises(openenv.Unimplemented):
                await env.list_tools()
            with pytest.raises(openenv.Unimplemented):
                await env.call_tool("anything")
        finally:
            await env.close()


# --------------------------------------------------------------------------- production mode


async def test_tools_only_mode() -> None:
    async with running(ToolBox, tools_only=True) as srv:
        env = await _client(srv)
        try:
            caps = env.info.capabilities
            assert caps.tools and caps.tools_only
            with pytest.raises(openenv.Unimplemented, match="tools-only"):
                await env.reset()
            with pytest.raises(openenv.Unimplemented):
                await env.step(CallToolAction("add", {"a": 1}))
            with pytest.raises(openenv.Unimplemented):
                await env.state()
            assert len(await env.list_tools()) == 10
            assert (await env.call_tool("add", {"a": 5, "b": 5})).data == 10
            with pytest.raises(openenv.InvalidArgument):
                await env.call_tool("add", {})
        finally:
            await env.close()


# --------------------------------------------------------------------------- docs


def _python_blocks(md: Path) -> str:
    return "\n\n".join(re.findall(r"```python\n(.*?)```", md.read_text(), re.S))


def test_docs_tools_examples_run(tmp_path: Path) -> None:
    """Every ```python block of docs/tools.md, concatenated, runs as one script."""
    code = _python_blocks(REPO / "docs" / "tools.md")
    assert "openenv.tool" in code
    script = tmp_path / "tools_examples.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all tools examples passed" in proc.stdout
