"""Rubrics end to end on the wire: the spec tree in the environment info, the score tree
on every step (root = reward), the semantics of each kind (weighted_sum, sequential,
gate, trajectory, llm_judge), async rubrics, per-session state, failures, and an
``LLMJudge`` against a small OpenAI-compatible server on 127.0.0.1 started by the test.

Every rubric evaluation here goes through a real ``openenv.Server`` and an
``openenv.EnvClient``; the docs/rubrics.md examples are run as a script at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from openenv_testkit import running

import openenv
from openenv.rubrics import (
    CREDITS_METADATA_KEY,
    ExponentialDiscountingTrajectoryRubric,
    FunctionRubric,
    Gate,
    LLMJudge,
    Rubric,
    Score,
    Sequential,
    TrajectoryRubric,
    WeightedSum,
    leaf,
)
from openenv.v1 import environment_pb2, environment_pb2_grpc

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


# --------------------------------------------------------------------------- helpers


def adds_up(spec: Any, s: Score) -> None:
    """The rule of docs/rubrics.md for one node and, recursively, its children."""
    assert s.name == spec.name
    kids = {c.name: c for c in spec.children}
    # Evaluated children are a prefix of the spec's children, in spec order.
    assert [c.name for c in s.children] == [c.name for c in spec.children][: len(s.children)]
    for c in s.children:
        assert c.weight == kids[c.name].weight
        adds_up(kids[c.name], c)
    params = json_format.MessageToDict(spec.params) if spec.HasField("params") else {}
    if spec.kind == "weighted_sum":
        assert len(s.children) == len(spec.children)
        total = 0.0
        for c in s.children:
            total += c.weight * c.score
        assert s.score == total
    elif spec.kind == "sequential":
        t = params["threshold"]
        assert all(c.score >= t for c in s.children[:-1])
        assert len(s.children) == len(spec.children) or s.children[-1].score < t
        assert s.score == s.children[-1].score
    elif spec.kind == "gate":
        t = params["threshold"]
        if s.children[0].score < t:
            assert s.score == 0.0 and len(s.children) == 1
        else:
            assert len(s.children) == len(spec.children)
            assert s.score == s.children[-1].score
    if spec.HasField("minimum"):
        assert s.score >= spec.minimum
    if spec.HasField("maximum"):
        assert s.score <= spec.maximum


def check(client: openenv.EnvClient, r: openenv.StepResult) -> Score:
    """A rubric step: the breakdown is present, its root equals the reward, it adds up."""
    assert r.reward is not None and r.reward_breakdown is not None
    s = r.reward_breakdown
    assert isinstance(s, Score)
    assert s.score == r.reward
    adds_up(client.info.rubric, s)
    return s


@contextlib.asynccontextmanager
async def session(env_cls: Any, **server_kw: Any) -> AsyncIterator[openenv.EnvClient]:
    async with running(env_cls, **server_kw) as srv:
        client = openenv.EnvClient(srv.address, timeout=WAIT_S)
        await asyncio.wait_for(client.connect(), WAIT_S)
        try:
            yield client
        finally:
            await client.close()


# --------------------------------------------------------------------------- environments


@leaf(minimum=0, maximum=1)
def is_number(action: Any, observation: Any) -> float:
    """The answer is an integer."""
    return 1.0 if re.fullmatch(r"-?\d+", str(action)) else 0.0


class Correct(Rubric):
    """The answer equals the environment's target."""

    minimum, maximum = 0.0, 1.0

    def score(self, action: Any, observation: Any) -> Score:
        ok = str(action) == str(self.env.target)
        return Score(1.0 if ok else 0.0, reason="match" if ok else f"wanted {self.env.target}")


@leaf(minimum=0, maximum=1)
def brevity(action: Any, observation: Any) -> float:
    """Longer answers cost more."""
    return min(1.0, len(str(action)) / 10)


class Answering(openenv.Environment):
    """Answers are strings; the target is 42; "end" terminates."""

    action_type = str
    observation_type = str
    deterministic = True
    rubric = Gate(
        is_number,
        WeightedSum([Correct(), brevity], [1.0, -0.5], name="total"),
        name="reward",
        description="format gate, then correctness minus a length penalty",
    )

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> str:
        self.target = 42
        return "answer"

    def step(self, action: str) -> openenv.StepResult:
        if action == "own":  # the environment's own reward wins: the rubric is not used
            return openenv.StepResult("own reward", reward=0.5)
        return openenv.StepResult(f"got {action}", terminated=action == "end")


async def test_spec_in_info_and_get_info() -> None:
    async with running(Answering) as srv:
        client = openenv.EnvClient(srv.address, timeout=WAIT_S)
        await client.connect()
        try:
            spec = client.info.rubric
            assert spec == Answering.rubric.spec() and client.rubric == spec
            assert (spec.name, spec.kind, spec.description) == (
                "reward",
                "gate",
                "format gate, then correctness minus a length penalty",
            )
            assert json_format.MessageToDict(spec.params) == {"threshold": 1.0}
            cond, total = spec.children
            assert (cond.name, cond.kind, cond.description, cond.minimum, cond.maximum) == (
                "is_number",
                "leaf",
                "The answer is an integer.",
                0.0,
                1.0,
            )
            assert (total.kind, [(c.name, c.weight) for c in total.children]) == (
                "weighted_sum",
                [("correct", 1.0), ("brevity", -0.5)],
            )
            assert total.children[0].description == "The answer equals the environment's target."
            assert (total.minimum, total.maximum) == (-0.5, 1.0)
            assert (spec.minimum, spec.maximum) == (-0.5, 1.0)
        finally:
            await client.close()
        # GetInfo (no session) carries the same tree.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            info = (
                await asyncio.wait_for(
                    environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(environment_pb2.GetInfoRequest()), WAIT_S
                )
            ).info
        assert info.rubric == Answering.rubric.spec()


async def test_each_step_carries_the_breakdown() -> None:
    async with session(Answering) as env:
        r = await env.reset()
        assert r.reward is None and r.reward_breakdown is None  # reset: no reward, no breakdown
        r = await env.step("forty-two")  # gate closed
        s = check(env, r)
        assert r.reward == 0.0 and [c.name for c in s.children] == ["is_number"]
        assert s.reason.startswith("gate closed")
        r = await env.step("42")  # gate open, correct: 1 - 0.5 * 0.2
        s = check(env, r)
        assert r.reward == 1.0 - 0.5 * 0.2
        assert s.find("total.correct").score == 1.0 and s.find("total.correct").reason == "match"
        assert s.find("total.brevity").weight == -0.5
        r = await env.step("7")  # gate open, wrong
        s = check(env, r)
        assert r.reward == -0.5 * 0.1 and s.find("total.correct").reason == "wanted 42"
        r = await env.step("own")
        assert r.reward == 0.5 and r.reward_breakdown is None
        r = await env.step("end")
        assert r.terminated and r.reward == 0.0 and check(env, r).children[0].score == 0.0


@leaf(minimum=0, maximum=1)
def first(action: Any, observation: Any) -> float:
    return float(action["first"])


@leaf(minimum=0, maximum=1)
def second(action: Any, observation: Any) -> float:
    return float(action["second"])


@leaf(minimum=0, maximum=1)
def third(action: Any, observation: Any) -> float:
    return float(action["third"])


class Checks(openenv.Environment):
    """Actions are dicts of three scores; the rubric is a Sequential with threshold 0.5."""

    rubric = WeightedSum(
        [Sequential(first, second, third, threshold=0.5, name="seq"), Gate(first, name="gate1", threshold=0.5)],
        [1.0, 1.0],
        name="root",
    )

    def reset(self, **kw: Any) -> str:
        return "ready"

    def step(self, action: dict[str, float]) -> str:
        return "scored"


@pytest.mark.parametrize(
    ("scores", "evaluated", "seq", "gate1"),
    [
        ({"first": 1.0, "second": 0.7, "third": 0.2}, ["first", "second", "third"], 0.2, 1.0),  # all pass: last
        ({"first": 1.0, "second": 0.3, "third": 0.9}, ["first", "second"], 0.3, 1.0),  # stops at the failing one
        ({"first": 0.0, "second": 1.0, "third": 1.0}, ["first"], 0.0, 0.0),  # fails at once; one-child gate closed
        ({"first": 0.5, "second": 0.5, "third": 1.0}, ["first", "second", "third"], 1.0, 0.5),  # threshold inclusive
    ],
)
async def test_sequential_and_one_child_gate(
    scores: dict[str, float], evaluated: list[str], seq: float, gate1: float
) -> None:
    async with session(Checks) as env:
        await env.reset()
        s = check(env, await env.step(scores))
        assert [c.name for c in s["seq"].children] == evaluated
        assert s["seq"].score == seq and s["gate1"].score == gate1
        assert s.score == seq + gate1


# --------------------------------------------------------------------------- trajectories


class Race(openenv.Environment):
    """Steps until "win" or "lose"; the reward is an episode-level, discounted rubric."""

    action_type = str
    max_episode_steps = 5
    rubric = ExponentialDiscountingTrajectoryRubric(
        lambda trajectory: 1.0 if trajectory[-1][0] == "win" else -1.0, gamma=0.5, name="episode", minimum=-1, maximum=1
    )

    def reset(self, **kw: Any) -> str:
        return "go"

    def step(self, action: str) -> openenv.StepResult:
        return openenv.StepResult(action, terminated=action in ("win", "lose"))


async def test_trajectory_credits_are_discounted() -> None:
    async with session(Race) as env:
        spec = env.info.rubric
        assert spec.kind == "trajectory" and json_format.MessageToDict(spec.params) == {
            "gamma": 0.5,
            "intermediate_reward": 0.0,
        }
        await env.reset()
        for _ in range(3):
            r = await env.step("run")
            assert r.reward == 0.0 and CREDITS_METADATA_KEY not in r.metadata
            assert r.reward_breakdown.reason.endswith("episode running")
        r = await env.step("win")
        assert r.terminated and r.reward == 1.0
        assert r.metadata[CREDITS_METADATA_KEY] == {"episode": [0.125, 0.25, 0.5, 1.0]}
        assert r.reward_breakdown.reason == "episode of 4 steps scored 1"

        await env.reset()  # the trajectory is cleared on reset
        r = await env.step("lose")
        assert r.reward == -1.0 and r.metadata[CREDITS_METADATA_KEY] == {"episode": [-1.0]}

        await env.reset()  # truncation by max_episode_steps also ends the episode
        for _ in range(5):
            r = await env.step("run")
        assert r.truncated and r.reward == -1.0
        assert r.metadata[CREDITS_METADATA_KEY] == {"episode": [-0.0625, -0.125, -0.25, -0.5, -1.0]}


async def test_each_session_has_its_own_rubric() -> None:
    async with running(Race) as srv:
        a = openenv.EnvClient(srv.address, timeout=WAIT_S)
        b = openenv.EnvClient(srv.address, timeout=WAIT_S)
        await a.connect()
        await b.connect()
        try:
            await a.reset()
            await b.reset()
            for _ in range(3):
                await a.step("run")
            r = await b.step("win")  # b's trajectory holds only b's step
            assert r.metadata[CREDITS_METADATA_KEY] == {"episode": [1.0]}
            r = await a.step("win")
            assert r.metadata[CREDITS_METADATA_KEY] == {"episode": [0.125, 0.25, 0.5, 1.0]}
        finally:
            await a.close()
            await b.close()
    assert Race.rubric.trajectory == []  # the class's rubric is only a template


# --------------------------------------------------------------------------- sync, async, failures


@leaf
def where_sync(action: Any, observation: Any) -> Score:
    return Score(1.0, reason=threading.current_thread().name)


@leaf
async def where_async(action: Any, observation: Any) -> Score:
    await asyncio.sleep(0)
    return Score(0.5, reason=threading.current_thread().name)


class SyncScored(openenv.Environment):
    rubric = WeightedSum([where_sync], name="root")

    def reset(self, **kw: Any) -> str:
        return "x"

    def step(self, action: Any) -> str:
        return "y"


class AsyncScored(SyncScored):
    rubric = WeightedSum([where_sync, where_async], [0.5, 1.0], name="root")


async def test_sync_rubric_runs_in_a_worker_thread_async_on_the_loop() -> None:
    loop_thread = threading.current_thread().name
    async with session(SyncScored) as env:
        await env.reset()
        s = check(env, await env.step(1))
        assert s["where_sync"].reason.startswith("openenv-env") and s.score == 1.0
    async with session(AsyncScored) as env:
        await env.reset()
        s = check(env, await env.step(1))
        assert s["where_async"].reason == loop_thread and s["where_sync"].reason == loop_thread
        assert s.score == 0.5 * 1.0 + 1.0 * 0.5


def fragile(action: str, observation: Any) -> float:
    if action == "raise":
        raise ValueError("rubric exploded")
    if action == "nan":
        return float("nan")
    return 2.0 if action == "high" else 1.0


class Broken(openenv.Environment):
    action_type = str
    rubric = FunctionRubric(fragile, minimum=0, maximum=1)

    def reset(self, **kw: Any) -> str:
        return "x"

    def step(self, action: str) -> str:
        return "y"


async def test_rubric_failures_are_internal_and_not_counted() -> None:
    async with session(Broken) as env:
        await env.reset()
        for action, pattern in [
            ("raise", "ValueError: rubric exploded"),
            ("high", "above its maximum 1"),
            ("nan", "must be finite"),
        ]:
            with pytest.raises(openenv.Internal, match=re.escape(pattern)) as ei:
                await env.step(action)
            assert not ei.value.fatal
        st = await env.state()
        assert st.step_count == 0 and st.status is openenv.EpisodeStatus.RUNNING
        assert (await env.step("ok")).reward == 1.0


class SlowScore(Rubric):
    async def score(self, action: Any, observation: Any) -> float:
        await asyncio.sleep(3600 if action == "slow" else 0)
        return 1.0


class SlowScored(openenv.Environment):
    action_type = str
    rubric = SlowScore()

    def reset(self, **kw: Any) -> str:
        return "x"

    def step(self, action: str) -> str:
        return "y"


async def test_scoring_counts_against_the_step_timeout() -> None:
    async with session(SlowScored) as env:
        await env.reset()
        assert (await env.step("fast", step_timeout=WAIT_S)).reward == 1.0
        with pytest.raises(openenv.DeadlineExceeded, match="rubric 'slow_score'"):
            await env.step("slow", step_timeout=0.2)
        assert (await env.state()).status is openenv.EpisodeStatus.ABORTED


def test_declaration_errors() -> None:
    class NotARubric(openenv.Environment):
        rubric = 3  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"must be an openenv\.rubrics\.Rubric"):
        openenv.Server(NotARubric, "127.0.0.1", 0)
    with pytest.raises(ValueError, match="two children are named"):
        WeightedSum([is_number, is_number])
    with pytest.raises(ValueError, match=re.escape("must not contain '.'")):
        FunctionRubric(lambda a, o: 1.0, name="a.b")
    with pytest.raises(ValueError, match="2 rubrics but 1 weights"):
        WeightedSum([is_number, brevity], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        Sequential()
    with pytest.raises(TypeError, match="is async"):
        AsyncScored.rubric.evaluate_sync(1, None)


def test_score_round_trip_and_navigation() -> None:
    s = Score(0.5, "root", 1.0, [Score(1.0, "a", 0.5, reason="why"), Score(0.0, "b", 0.5)], "r")
    assert Score.from_proto(s.to_proto()) == s
    assert s["a"].reason == "why" and s.find("b").score == 0.0
    assert [p for p, _ in s.walk()] == ["root", "root.a", "root.b"]
    with pytest.raises(KeyError):
        s["c"]


# --------------------------------------------------------------------------- LLM judge


class ChatServer:
    """A minimal OpenAI-compatible ``POST /v1/chat/completions`` server on 127.0.0.1:0
    (HTTP/1.1 with keep-alive, JSON bodies). ``reply(request) -> (status, body)`` decides
    each answer; every request is recorded as ``(path, headers, json)``."""

    def __init__(self, reply: Callable[[dict[str, Any]], Awaitable[tuple[int, Any]]]) -> None:
        self.reply = reply
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> ChatServer:
        self.server = await asyncio.start_server(self._spawn, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.wait_for(self.server.wait_closed(), WAIT_S)

    def _spawn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._handle(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, v = h.decode().split(":", 1)
                    headers[k.strip().lower()] = v.strip()
                body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
                self.requests.append((path, headers, body))
                status, payload = await self.reply(body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def completion(content: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "judge-small",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }


async def canned(request: dict[str, Any]) -> tuple[int, Any]:
    """The judge's answers, chosen by the answer under review (the user message's last word)."""
    answer = request["messages"][-1]["content"].split()[-1]
    if answer == "good":
        return 200, completion("The answer is right, 42 is the product.\nScore: 8")
    if answer == "json":
        return 200, completion('{"score": 3, "reason": "partly right"}')
    if answer == "bare":
        return 200, completion(" 10 ")
    if answer == "garbage":
        return 200, completion("I cannot grade this.")
    if answer == "http500":
        return 500, {"error": {"message": "overloaded"}}
    if answer == "malformed":
        return 200, {"unexpected": True}
    if answer == "slow":
        await asyncio.sleep(3600)
    return 200, completion("Score: 0")


def judged_env(base_url: str, **judge_kw: Any) -> type[openenv.Environment]:
    """An environment whose reward is an LLM judge (plus a sync check) at ``base_url``."""

    class Judged(openenv.Environment):
        action_type = str
        observation_type = str
        rubric = WeightedSum(
            [
                LLMJudge(
                    "Grade this answer: {action}",
                    base_url=base_url,
                    model="judge-small",
                    scale=(0, 10),
                    name="judge",
                    **judge_kw,
                ),
                FunctionRubric(lambda a, o: 1.0, name="present", minimum=0, maximum=1),
            ],
            [0.75, 0.25],
            name="root",
        )

        def reset(self, **kw: Any) -> str:
            return "answer"

        def step(self, action: str) -> str:
            return f"answered {action}"

    return Judged


async def test_llm_judge_scores_from_a_local_server() -> None:
    # The judge's timeout is generous for the answers that must arrive; the short one (0.5 s)
    # is only used against the server's "slow" answer, which never comes (it sleeps an hour).
    async with (
        ChatServer(canned) as chat,
        session(judged_env(chat.base_url, api_key="test-key", timeout_s=WAIT_S)) as env,
    ):
        judge_spec = env.info.rubric.children[0]
        assert judge_spec.kind == "llm_judge" and (judge_spec.minimum, judge_spec.maximum) == (0.0, 1.0)
        assert json_format.MessageToDict(judge_spec.params) == {
            "model": "judge-small",
            "scale": [0.0, 10.0],
            "temperature": 0.0,
        }
        await env.reset()
        s = check(env, await env.step("good"))
        assert s["judge"].score == 0.8 and "42 is the product" in s["judge"].reason
        assert s.score == 0.75 * 0.8 + 0.25 * 1.0
        s = check(env, await env.step("json"))
        assert (s["judge"].score, s["judge"].reason) == (0.3, "partly right")
        s = check(env, await env.step("bare"))
        assert s["judge"].score == 1.0

        path, headers, body = chat.requests[0]
        assert path == "/v1/chat/completions" and headers["authorization"] == "Bearer test-key"
        assert body["model"] == "judge-small" and body["temperature"] == 0.0
        assert body["messages"][0]["role"] == "system" and "Score: X" in body["messages"][0]["content"]
        assert body["messages"][1] == {"role": "user", "content": "Grade this answer: good"}

        for answer, pattern in [
            ("garbage", "no score in the judge's reply 'I cannot grade this.'"),
            ("http500", "answered HTTP 500"),
            ("malformed", "malformed chat completion"),
        ]:
            with pytest.raises(openenv.Internal, match=re.escape("LLM judge 'judge' failed: ")) as ei:
                await env.step(answer)
            assert pattern in ei.value.message and not ei.value.fatal
        st = await env.state()
        assert st.step_count == 3 and st.status is openenv.EpisodeStatus.RUNNING
        async with session(judged_env(chat.base_url, api_key="test-key", timeout_s=0.5)) as impatient:
            await impatient.reset()
            with pytest.raises(openenv.Internal, match=re.escape("LLM judge 'judge' failed: ")) as ei:
                await impatient.step("slow")
            assert "within 0.5 s" in ei.value.message and not ei.value.fatal
            st = await impatient.state()
            assert st.step_count == 0 and st.status is openenv.EpisodeStatus.RUNNING


async def test_llm_judge_fallback_score() -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    async with ChatServer(canned) as chat:
        for base_url, answer, why in [(chat.base_url, "garbage", "no score"), (dead, "good", "request to")]:
            async with session(judged_env(base_url, fallback_score=0.25, timeout_s=WAIT_S)) as env:
                assert json_format.MessageToDict(env.info.rubric.children[0].params)["fallback_score"] == 0.25
                await env.reset()
                s = check(env, await env.step(answer))
                assert s["judge"].score == 0.25 and s["judge"].reason.startswith("judge failed, fallback score used")
                assert why in s["judge"].reason


async def test_llm_judge_parsing_without_a_server() -> None:
    judge = LLMJudge("{action}", base_url="http://127.0.0.1:1/v1", model="m", scale=(1, 5))
    assert judge.url == "http://127.0.0.1:1/v1/chat/completions"
    assert judge.parse("Reasoning... score: 2\nFinal Score: 4") == (4.0, "Reasoning... score: 2\nFinal Score: 4")
    assert judge.parse("**Score:** 3.5")[0] == 3.5
    assert judge.normalize(4) == 0.75 and judge.normalize(9) == 1.0 and judge.normalize(0) == 0.0
    copy = judge.clone()
    assert copy is not judge and copy.url == judge.url


# --------------------------------------------------------------------------- docs


def _python_blocks(md: Path) -> str:
    return "\n\n".join(re.findall(r"```python\n(.*?)```", md.read_text(), re.S))


def test_docs_rubrics_examples_run(tmp_path: Path) -> None:
    """Every ```python block of docs/rubrics.md, concatenated, runs as one script."""
    code = _python_blocks(REPO / "docs" / "rubrics.md")
    assert "WeightedSum" in code and "LLMJudge" in code
    script = tmp_path / "rubrics_examples.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all rubrics examples passed" in proc.stdout


def test_trajectory_rubric_subclass_api() -> None:
    """Overriding score_trajectory and compute_step_rewards (no server needed for the math)."""

    class LastIsWin(TrajectoryRubric):
        def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float:
            return float(trajectory[-1][0] == "win")

        def compute_step_rewards(self) -> list[float]:
            n = len(self.trajectory)
            return [self.final_score / n] * n  # type: ignore[operator]

    r = LastIsWin()
    assert r.evaluate_sync("a", None).score == 0.0
    s = r.evaluate_sync("win", None, done=True)
    assert s.score == 1.0 and s.credits == [0.5, 0.5]
    r.reset()
    assert r.trajectory == [] and r.final_score is None
