"""``openenv import verifiers:MODULE``: a real verifiers 0.4 taskset (written here against
verifiers' own API: a ``vf.Taskset`` of ``vf.Task``s with ``@vf.reward`` functions) served as an
openenv environment and certified. verifiers pins ``mcp==2.0.0`` (openenv's HTTP side needs
``mcp>=2.3``), so the taskset runs in verifiers' own locked interpreter (tools/verifiers_venv.py)
behind a pipe; the server's interpreter never imports verifiers.

What cannot be faked: the reward is computed by the taskset's reward functions in verifiers'
interpreter (each call leaves a mark naming that interpreter and its mcp); the answers, held in
the tasks' data, reach no client however it asks (the test attacks every surface a client has).

One server process (``openenv serve import:verifiers:...``, the certifier's own target) serves
every test; verifiers' venv is built once per checkout (~7 s from the wheel cache)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import openenv
from openenv_catalog.cli import import_command
from openenv_conformance import TargetOptions, certify, open_target

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools import verifiers_venv  # noqa: E402

# One worker runs the module: its tests share one server (and its verifiers worker, ~10 s to start).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("verifiers-import")]

# Answers no prompt gives away: a client that ever sees one has reached the task's data.
SECRETS = {"planet-3": "tellurium-8841", "planet-5": "argentum-2290", "planet-7": "osmium-5517"}

TASKSET = '''
"""Which secret word unlocks planet N: the answer lives in the task's data only."""
import json, os, sys
from importlib.metadata import version

import verifiers.v1 as vf

SECRETS = %(secrets)r


class VaultData(vf.TaskData):
    answer: str


class VaultTask(vf.Task[VaultData]):
    @vf.reward(weight=1.0)
    async def unlocked(self, trace: vf.Trace) -> float:
        with open(os.environ["VAULT_MARKS"], "a") as marks:  # who scored: this interpreter
            marks.write(json.dumps({"python": sys.executable, "mcp": version("mcp"), "task": self.data.id}) + "\\n")
        if trace.last_reply == "crash":
            raise ValueError(f"the answer was {self.data.answer}")  # must not reach the agent
        return 1.0 if trace.last_reply.strip() == self.data.answer else 0.0

    @vf.reward(weight=0.25)
    async def brevity(self, trace: vf.Trace) -> float:
        return 1.0 / max(1, len(trace.last_reply))


class VaultTaskset(vf.Taskset[VaultTask, vf.TasksetConfig]):
    def load(self):
        for task_id, answer in SECRETS.items():
            print("loading", task_id)  # stdout belongs to the protocol: this must not break it
            yield VaultTask(
                VaultData(id=task_id, prompt=f"Which word unlocks {task_id}? Reply with the word only.",
                          system_prompt="You are a vault keeper.", answer=answer),
                self.config.task,
            )


__all__ = ["VaultTaskset"]
'''


def _verifiers_python() -> Path:
    try:
        return verifiers_venv.ensure()
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"verifiers' interpreter cannot be built here (no package index, no cached wheels): {e}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, Path]]:
    """``openenv serve import:verifiers:vault_taskset`` (the certifier's target), the module on the
    worker's PYTHONPATH, verifiers' interpreter named by OPENENV_VERIFIERS_PYTHON."""
    python = _verifiers_python()
    d = tmp_path_factory.mktemp("vf")
    (d / "vault_taskset.py").write_text(TASKSET % {"secrets": SECRETS})
    marks = d / "marks.jsonl"
    env = {"OPENENV_VERIFIERS_PYTHON": str(python), "PYTHONPATH": str(d), "VAULT_MARKS": str(marks)}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        target = open_target("python:import:verifiers:vault_taskset", TargetOptions(ready_timeout=600))
        try:
            yield target, marks, python
        finally:
            target.stop()


def _texts(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def test_the_reward_is_the_tasksets_own_computed_in_verifiers_interpreter(served: tuple[Any, Path, Path]) -> None:
    """The right word earns 1 + 0.25/len (both reward functions, weighted as declared), a wrong
    one its brevity only; each score was computed by the taskset's code running in verifiers'
    interpreter, with verifiers' mcp pin (which the server's interpreter cannot hold)."""
    target, marks, python = served

    async def play() -> list[openenv.StepResult[Any]]:
        out = []
        async with openenv.ToolEnvClient(target.url) as env:
            for task, reply in (("planet-5", SECRETS["planet-5"]), ("planet-5", "iron"), ("planet-7", "")):
                await env.reset(options={"task_id": task})
                out.append(await env.step(openenv.CallToolAction("submit", {"answer": reply})))
        return out

    right, wrong, empty = asyncio.run(play())
    assert right.reward == pytest.approx(1.0 + 0.25 / len(SECRETS["planet-5"])) and right.terminated
    assert wrong.reward == pytest.approx(0.25 / 4) and wrong.terminated
    assert empty.reward == pytest.approx(0.25)
    scored = [json.loads(line) for line in marks.read_text().splitlines()]
    assert [m["task"] for m in scored][-3:] == ["planet-5", "planet-5", "planet-7"]
    assert {m["mcp"] for m in scored} == {"2.0.0"}
    assert {m["python"] for m in scored} == {str(python)} and python != Path(sys.executable)


def test_no_client_reaches_a_tasks_answer(served: tuple[Any, Path, Path]) -> None:
    """Everything a client can ask for (the environment's description, tools, tasks, the reset
    observation in both feedback levels, get_prompt, state, a wrong answer's result, a scorer
    that fails quoting the answer, refused calls' errors) is collected, and holds no answer;
    the answer itself still earns the reward, so it was the hidden data, not an absent one."""
    target, _, _ = served

    async def attack() -> tuple[list[str], float | None]:
        seen: list[str] = []
        async with openenv.ToolEnvClient(target.url) as env:
            assert env.info is not None
            seen.append(str(env.info))
            seen.append(_texts([(t.name, t.description, t.input_schema) for t in await env.list_tools()]))
            seen.append(_texts([(t.id, dict(t.metadata)) for t in await env.list_tasks("all")]))
            for feedback in ("strict", "rich"):
                for task in SECRETS:
                    r = await env.reset(options={"task_id": task, "feedback": feedback})
                    seen += [str(r.observation), _texts(r.metadata)]
                    seen.append(str(await env.call_tool("get_prompt", {})))
                    seen.append(str(await env.state()))
                    for bad in (
                        lambda: env.call_tool("submit", {"answer": "x"}),  # a side call of the grader
                        lambda: env.step(openenv.CallToolAction("submit", {"answer": 7})),
                        lambda: env.step(openenv.CallToolAction("open_vault", {})),
                    ):
                        try:
                            seen.append(str(await bad()))
                        except openenv.EnvError as e:
                            seen.append(str(e))
                    s = await env.step(openenv.CallToolAction("submit", {"answer": "crash"}))
                    assert s.reward == 0.0 and s.terminated  # the scorer raised: the answer earns nothing
                    seen += [str(s.observation), _texts(s.metadata), str(s.reward_breakdown), str(s.reward)]
                    try:
                        await env.step(openenv.CallToolAction("submit", {"answer": "again"}))
                    except openenv.EnvError as e:
                        seen.append(str(e))
                    seen.append(str(await env.state()))
            await env.reset(options={"task_id": "planet-3"})
            won = await env.step(openenv.CallToolAction("submit", {"answer": SECRETS["planet-3"]}))
        return seen, won.reward

    seen, won = asyncio.run(attack())
    everything = "\n".join(seen)
    assert "Which word unlocks planet-3?" in everything  # the prompt does reach the agent
    for secret in SECRETS.values():
        assert secret not in everything
        assert secret.split("-")[0] not in everything.lower()
    assert won is not None and won > 1.0


def test_openenv_import_verifiers_describes_it_and_the_served_import_certifies(served: tuple[Any, Path, Path]) -> None:
    """`openenv import verifiers:MODULE` names its tools and the commands that serve and certify
    it; the certifier passes `openenv serve import:verifiers:MODULE`."""
    target, _, _ = served
    r = CliRunner().invoke(import_command, ["verifiers:vault_taskset"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["tools"] == ["get_prompt", "submit"] and info["serve"] == "openenv serve import:verifiers:vault_taskset"
    report = certify(target, seed=1, max_examples=5, timeout=60)
    failed = [(c.id, c.reason) for c in report.results if c.status in ("fail", "error")]
    assert report.exit_code == 0, failed


def test_a_taskset_that_cannot_be_served_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: tuple[Any, Path, Path]
) -> None:
    """A malformed id, and a missing interpreter, are refused in one line each, saying why (a
    module that is no taskset is refused by the worker with verifiers' own loader's reason)."""
    from openenv_catalog.importers import ImporterUnavailable
    from openenv_catalog.importers.verifiers import load

    with pytest.raises(ValueError, match="expected verifiers:TASKSET"):
        load("../etc; rm")
    monkeypatch.delenv("OPENENV_VERIFIERS_PYTHON")
    load.cache_clear()
    with pytest.raises(ImporterUnavailable, match="OPENENV_VERIFIERS_PYTHON"):
        load("vault_taskset")
