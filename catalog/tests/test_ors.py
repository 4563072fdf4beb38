"""``openenv import ors:URL``: an Open Reward Standard server's environment served as an openenv
environment, over a real ORS server (the ORS SDK's own, in its own process on loopback), and
certified. The ORS server keeps the verifier: the agent reaches it only through tool steps."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ors", reason="the ors extra: pip install 'protoenv-catalog[ors]'")

from click.testing import CliRunner

import openenv
from openenv_catalog.cli import import_command
from openenv_conformance import certify

SERVER = """
import socket, sys
import uvicorn
from pydantic import BaseModel
from ors import Environment, Server, Split, TextBlock, ToolOutput, tool

TASKS = [{"a": a, "b": b} for a, b in ((2, 3), (7, 5), (11, 4), (6, 6))]


class AnswerInput(BaseModel):
    value: int


class NoInput(BaseModel):
    pass


class Sums(Environment):
    @classmethod
    def list_splits(cls):
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split):
        return TASKS[:3] if split == "train" else TASKS[3:]

    def get_prompt(self):
        return [TextBlock(text=f"What is {self.task_spec['a']} + {self.task_spec['b']}? Call answer(value).")]

    @tool
    def hint(self, params: NoInput) -> ToolOutput:
        "A hint (no reward)."
        return ToolOutput(blocks=[TextBlock(text="Add the two numbers.")], reward=0.0, finished=False)

    @tool
    def answer(self, params: AnswerInput) -> ToolOutput:
        "Submit the sum; ends the episode."
        ok = params.value == self.task_spec["a"] + self.task_spec["b"]
        text = "Correct" if ok else "Wrong"
        return ToolOutput(blocks=[TextBlock(text=text)], reward=1.0 if ok else 0.0, finished=True)


sock = socket.socket()
sock.bind(("127.0.0.1", 0))
server = Server([Sums])
config = uvicorn.Config(server.app, log_level="warning", access_log=False)
open(sys.argv[1], "w").write(str(sock.getsockname()[1]))
uvicorn.Server(config).run(sockets=[sock])
"""


@pytest.fixture(scope="module")
def ors_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("ors")
    (d / "server.py").write_text(SERVER)
    ready = d / "port"
    proc = subprocess.Popen([sys.executable, str(d / "server.py"), str(ready)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        port = ready.read_text()
        import httpx

        while time.monotonic() < deadline:  # the socket is bound; wait until it answers
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/sums"
    finally:
        proc.terminate()
        proc.wait(30)


async def _play(cls: type, task_id: str, value: int) -> tuple[str, list[float], bool]:
    async with openenv.Server(cls, "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
        first = await env.reset(options={"task_id": task_id})
        hint = await env.step(openenv.CallToolAction("hint", {}))
        r = await env.step(openenv.CallToolAction("answer", {"value": value}))
        text = first.observation.result.content[0]["text"]
        return text, [hint.reward, r.reward], r.terminated


def test_an_ors_environment_is_served_with_its_tools_tasks_and_the_servers_rewards(ors_url: str) -> None:
    """The ORS environment's tools and splits become openenv tools and tasks (SPLIT/INDEX); an
    episode is an ORS session on its task; the reward is the ORS server's verdict (1 for the
    right sum, 0 for a wrong one) and its `finished` ends the episode; the task's content (its
    answer) never reaches the agent."""
    import asyncio

    from openenv_catalog.importers.ors import load

    cls = load(ors_url)
    assert sorted(cls.tools()) == ["answer", "hint"]
    assert [t.id for t in cls.list_tasks("train")] == ["train/0", "train/1", "train/2"]
    assert [t.metadata for t in cls.list_tasks("test")] == [{}]
    text, rewards, done = asyncio.run(_play(cls, "train/1", 12))
    assert text.startswith("What is 7 + 5?") and rewards == [0.0, 1.0] and done
    text, rewards, done = asyncio.run(_play(cls, "test/0", 13))
    assert text.startswith("What is 6 + 6?") and rewards == [0.0, 0.0] and done


def test_an_ors_tool_is_a_step_never_a_free_side_call(ors_url: str) -> None:
    """Every ORS call advances the ORS session and may grade it: as an uncounted side call it
    would be an oracle tried as often as wanted, so it is refused; malformed arguments are
    refused before the ORS server is asked."""
    import asyncio

    from openenv_catalog.importers.ors import load

    async def main() -> None:
        async with openenv.Server(load(ors_url), "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
            await env.reset(options={"task_id": "train/0"})
            with pytest.raises(openenv.FailedPrecondition, match="call it as a step"):
                await env.call_tool("answer", {"value": 5})
            with pytest.raises(openenv.InvalidArgument):
                await env.step(openenv.CallToolAction("answer", {"value": "five"}))
            r = await env.step(openenv.CallToolAction("answer", {"value": 5}))
            assert r.reward == 1.0 and r.terminated

    asyncio.run(main())


def test_openenv_import_ors_describes_it_and_the_import_certifies(ors_url: str) -> None:
    """`openenv import ors:URL` names its tools and the commands that serve and certify it; the
    certifier passes the imported environment."""
    r = CliRunner().invoke(import_command, [f"ors:{ors_url}"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["tools"] == ["answer", "hint"] and info["serve"] == f"openenv serve import:ors:{ors_url}"
    report = certify(f"python:import:ors:{ors_url}", seed=1, max_examples=5, timeout=60)
    failed = [(c.id, c.reason) for c in report.results if c.status in ("fail", "error")]
    assert report.exit_code == 0, failed


def test_a_bad_ors_url_is_a_clear_error(tmp_path: Path) -> None:
    """A URL that is not http(s)://host:port/NAME is refused in one line."""
    from openenv_catalog.importers.ors import load

    with pytest.raises(ValueError, match="expected ors:http"):
        load("ftp://example/x")
