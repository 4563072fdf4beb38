"""Agent harnesses for real, offline (docs/harnesses.md): mini-swe-agent (the Python package),
Codex CLI, OpenCode and Claude Code (npm packages, installed by `make venv` under .harness-tools/)
solve a task of the coding environment through `openenv.harness.run_harness`, against a scripted
OpenAI- and Anthropic-compatible model on loopback; the capture proxy records every call with its tokens;
the environment's reward scores each episode; traces reload losslessly.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minisweagent", reason="the harness extra: pip install 'protoenv[harness]'")

import openenv
from coding_env import CodingEnvironment
from coding_env.problems import by_id
from openenv.harness import (
    CALL_COLUMNS,
    CaptureProxy,
    ClaudeCodeAgent,
    CodexAgent,
    CommandAgent,
    EpisodeTags,
    MiniSweAgent,
    OpenCodeAgent,
    Script,
    ScriptedModel,
    TraceWriter,
    decode_call,
    load_trace,
    read_trace,
    run_harness,
    to_grpo,
)
from openenv.harness._asgi import serve_in_thread

ROOT = Path(__file__).resolve().parents[3]
DEADLINE = 600.0
FIZZBUZZ = by_id("fizzbuzz").reference


def _script(finish: dict[str, Any], solution: str = FIZZBUZZ, *, mcp: bool = False) -> Script:
    """Write the solution, check it on the examples (envtool, or the harness's MCP tool),
    submit it, finish (the harness's way)."""
    check: dict[str, Any] = {"shell": '"$OPENENV_ENVTOOL" run_tests code=@solution.py'}
    if mcp:
        check = {"mcp": "run_tests", "arguments": {"code": solution}}
    return Script(
        (
            {"shell": f"cat > solution.py <<'EOF'\n{solution}EOF"},
            check,
            {"shell": "envtool submit code=@solution.py"},
            finish,
        )
    )


MINI_FINISH = {"shell": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
TEXT_FINISH = {"text": "Submitted."}  # Codex, OpenCode and Claude Code end their run on a plain message


def _npm_bin(program: str) -> str | None:
    """An npm harness installed by `make venv` (or named by OPENENV_<PROGRAM>_BIN)."""
    for candidate in (
        os.environ.get(f"OPENENV_{program.upper()}_BIN"),
        str(ROOT / ".harness-tools/node_modules/.bin" / program),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _harness_run(agent: Any, script: Script, tasks: list[str | None], out: Path, **kw: Any) -> tuple[list[Any], int]:
    """run_harness over a real coding_env gRPC server and a scripted model, both on loopback;
    returns the episode rows and how many requests the model served."""
    model = ScriptedModel(script)
    served = serve_in_thread(model)

    async def main() -> list[Any]:
        async with openenv.Server(CodingEnvironment, "127.0.0.1", 0) as srv:
            return await run_harness(
                srv.address, agent, tasks, f"{served.url}/v1", out, model="scripted", request_tokens=True, **kw
            )

    try:
        return asyncio.run(asyncio.wait_for(main(), DEADLINE)), model.requests
    finally:
        served.stop()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _generated(call: dict[str, Any]) -> str:
    """What the scripted model generated in a call (the text its token ids encode)."""
    r = call["response"]
    if call["api"] == "messages":
        block = r["content"][0]
        if block["type"] == "tool_use":
            return _canonical({"name": block["name"], "arguments": block["input"]})
        return str(block["text"])
    if call["api"] == "chat.completions":
        msg = r["choices"][0]["message"]
        if msg.get("tool_calls"):
            fn = msg["tool_calls"][0]["function"]
            return _canonical({"name": fn["name"], "arguments": json.loads(fn["arguments"])})
        return str(msg["content"])
    item = r["output"][0]
    if item["type"] == "function_call":
        return _canonical({"name": item["name"], "arguments": json.loads(item["arguments"])})
    return str(item["content"][0]["text"])


def _check_solved_and_failed(rows: list[Any], served: int, out: Path, agent: str, per_episode: int = 4) -> None:
    """``per_episode``: the script's 4 turns, plus the harness's own calls (OpenCode asks the
    model for a session title first: a model call like any other, so it is in the trace)."""
    by_task = {r["task_id"]: r for r in rows}
    ok, bad = by_task["fizzbuzz"], by_task["sum_list"]
    assert ok["status"] == "finished" and ok["solved"] and ok["reward"] == 1.0, ok
    # The same script on another task submits code without the function asked for: 0.
    assert bad["status"] == "finished" and not bad["solved"] and bad["reward"] == 0.0, bad
    for r in rows:  # each agent worked in its own workspace
        assert (Path(r["workspace"]) / "solution.py").read_text() == FIZZBUZZ
    assert not (ROOT / "solution.py").exists() and not (Path.cwd() / "solution.py").exists()
    trace = read_trace(out)
    calls = [decode_call(c) for c in trace["calls"]]
    # Every call the model served is in the trace, tagged with its episode, with its tokens.
    assert len(calls) == served == ok["calls"] + bad["calls"] == 2 * per_episode
    for r in rows:
        mine = sorted((c for c in calls if c["episode_id"] == r["episode_id"]), key=lambda c: c["call_index"])
        assert [c["call_index"] for c in mine] == list(range(per_episode))
        assert {(c["session_id"], c["task_id"], c["agent"]) for c in mine} == {(r["session_id"], r["task_id"], agent)}
    for c in calls:
        assert c["status"] == 200 and c["error"] is None
        assert bytes(c["completion_token_ids"]).decode() == _generated(c)
        assert len(c["completion_logprobs"]) == len(c["completion_token_ids"]) > 0
        assert c["prompt_token_ids"] and c["usage"]
    # The steps: reset, run_tests, submit per episode, the submit rewarded and final.
    steps = [s for s in trace["steps"] if s["episode_id"] == ok["episode_id"]]
    assert [json.loads(s["action"])["tool_name"] for s in steps[1:]] == ["run_tests", "submit"]
    assert steps[-1]["reward"] == 1.0 and steps[-1]["terminated"] and steps[-1]["final"]


def _check_lossless(out: Path) -> None:
    trace = read_trace(out)
    ds = load_trace(out)
    assert ds["calls"].to_list() == [{c: r[c] for c in CALL_COLUMNS} for r in trace["calls"]]
    assert ds["episodes"].to_list() == trace["episodes"]
    assert ds["steps"].to_list() == trace["steps"]
    assert ds["runs"].to_list() == trace["runs"]


def _run_doc_snippets(trace: Path, here: Path) -> None:
    """docs/harnesses.md's python blocks, in order, as one script, on this run as runs/r1."""
    code = "\n".join(re.findall(r"^```python\n(.*?)^```", (ROOT / "docs/harnesses.md").read_text(), re.S | re.M))
    (here / "runs").mkdir(parents=True)
    (here / "runs/r1").symlink_to(trace)
    namespace: dict[str, Any] = {}
    cwd = os.getcwd()
    os.chdir(here)
    try:
        exec(compile(code, "docs/harnesses.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    assert len(namespace["examples"]) == 4  # the calls of the solved episode
    for block in re.findall(r"^```json\n(.*?)^```", (ROOT / "docs/harnesses.md").read_text(), re.S | re.M):
        assert Script.from_json(json.loads(block)).steps  # the example script is one
    assert namespace["examples"][0]["messages"][-1]["tool_calls"]


def test_mini_swe_agent_solves_a_coding_task_and_every_call_is_captured(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rows, served = _harness_run(MiniSweAgent(), _script(MINI_FINISH), ["fizzbuzz", "sum_list"], out, concurrency=2)
    _check_solved_and_failed(rows, served, out, "mini-swe-agent")
    calls = [decode_call(c) for c in read_trace(out)["calls"]]
    assert {c["api"] for c in calls} == {"chat.completions"}
    for c in calls:  # LiteLLM's chat messages, token for token
        assert bytes(c["prompt_token_ids"]).decode() == _canonical(c["request"]["messages"])
        assert c["injected"] == {"return_token_ids": True, "logprobs": True}
    _check_lossless(out)
    [run] = read_trace(out)["runs"]
    assert run["agent"] == "mini-swe-agent" and run["tasks"] == ["fizzbuzz", "sum_list"] and run["concurrency"] == 2
    assert {r["run_id"] for r in rows} == {run["run_id"]}
    _run_doc_snippets(out, tmp_path / "docs")
    grpo = to_grpo(out)
    assert len(grpo["prompt_ids"]) == 8
    assert sorted(grpo["env_reward"]) == [0.0] * 4 + [1.0] * 4
    assert all(
        len(i) == len(lp) == len(m)
        for i, lp, m in zip(grpo["completion_ids"], grpo["logprobs"], grpo["env_mask"], strict=True)
    )


@pytest.mark.parametrize(
    ("program", "agent_class", "api", "per_episode"),
    [
        ("codex", CodexAgent, "responses", 4),
        ("opencode", OpenCodeAgent, "chat.completions", 5),
        ("claude", ClaudeCodeAgent, "messages", 4),
    ],
)
def test_an_npm_harness_solves_a_coding_task_and_every_streamed_call_is_captured(
    program: str, agent_class: Any, api: str, per_episode: int, tmp_path: Path
) -> None:
    exe = _npm_bin(program)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(f"{program} is not installed: make venv installs it under .harness-tools/")
        pytest.skip(f"{program} not installed (make venv installs it under .harness-tools/ when npm is there)")
    agent = agent_class(exe)
    rows, served = _harness_run(
        agent, _script(TEXT_FINISH, mcp=True), ["fizzbuzz", "sum_list"], tmp_path, concurrency=2
    )
    _check_solved_and_failed(rows, served, tmp_path, agent.name, per_episode)
    calls = [decode_call(c) for c in read_trace(tmp_path)["calls"]]
    assert {(c["api"], c["stream"]) for c in calls} == {(api, True)}
    # run_tests went through the harness's MCP client to the episode's MCP server.
    via_mcp = [c for c in calls if "run_tests" in _generated(c)]
    assert len(via_mcp) == 2
    for c in via_mcp:
        if api == "responses":
            assert c["response"]["output"][0]["namespace"] == "mcp__openenv"
        elif api == "messages":
            assert c["response"]["content"][0]["name"] == "mcp__openenv__run_tests"
        else:
            assert c["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "openenv_run_tests"
    _check_lossless(tmp_path)


def test_an_agent_past_its_time_budget_is_stopped_and_scores_zero(tmp_path: Path) -> None:
    rows, served = _harness_run(
        CommandAgent("sleep 600"), Script(({"text": "unused"},)), ["fizzbuzz"], tmp_path, time_budget_s=2.0
    )
    [row] = rows
    assert row["status"] == "timeout" and row["reward"] == 0.0 and not row["solved"] and row["calls"] == 0
    assert served == 0


def test_a_command_agent_reaches_the_tools_and_bad_tool_calls_fail_cleanly(tmp_path: Path) -> None:
    cmd = (
        "envtool list > tools.txt; envtool no_such_tool x=1; echo $? > bad.txt; "
        "envtool submit; echo $? > missing.txt; "
        f"printf '%s' {shlex.quote(FIZZBUZZ)} > s.py; envtool submit code=@s.py > submit.txt; "
        "envtool submit code=@s.py > again.txt; echo $? > again_rc.txt"
    )
    [row], _ = _harness_run(CommandAgent(cmd), Script(({"text": "unused"},)), ["fizzbuzz"], tmp_path)
    work = Path(row["workspace"])
    assert "submit(code)" in (work / "tools.txt").read_text()
    assert (work / "bad.txt").read_text().strip() != "0"
    assert (work / "missing.txt").read_text().strip() != "0"
    assert json.loads((work / "submit.txt").read_text().split("\n[")[0]) == {"reward": 1.0}  # strict feedback
    assert "episode is over" in (work / "again.txt").read_text()
    assert (work / "again_rc.txt").read_text().strip() == "1"
    assert row["status"] == "finished" and row["reward"] == 1.0 and row["solved"]


def test_the_proxy_passes_streams_through_and_records_both_apis(tmp_path: Path) -> None:
    import openai

    script = Script(({"text": "héllo, streamed world " * 3},))
    model = serve_in_thread(ScriptedModel(script))
    writer = TraceWriter(tmp_path)
    proxy = serve_in_thread(
        CaptureProxy(f"{model.url}/v1", request_tokens=True, default=EpisodeTags(writer.add_call, episode_id="e1"))
    )
    try:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0)
        msgs = [{"role": "user", "content": "hi"}]
        plain = client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        streamed = "".join(
            (ch.choices[0].delta.content or "") if ch.choices else ""
            for ch in client.chat.completions.create(
                model="m",
                messages=msgs,
                stream=True,
                stream_options={"include_usage": True},  # type: ignore[arg-type]
            )
        )
        resp = client.responses.create(model="m", input="hi")
        events = list(client.responses.create(model="m", input="hi", stream=True))
        assert plain.choices[0].message.content == streamed == resp.output_text == script.steps[0]["text"]
        assert events[-1].type == "response.completed"
    finally:
        proxy.stop()
        model.stop()
    calls = [decode_call(c) for c in read_trace(tmp_path)["calls"]]
    assert [(c["api"], c["stream"]) for c in calls] == [
        ("chat.completions", False), ("chat.completions", True), ("responses", False), ("responses", True),
    ]  # fmt: skip
    text = script.steps[0]["text"].encode()
    for c in calls:
        assert c["episode_id"] == "e1" and c["status"] == 200
        assert bytes(c["completion_token_ids"]) == text
        assert len(c["completion_logprobs"]) == len(text)
        assert c["ttft_s"] is not None and c["duration_s"] >= c["ttft_s"]
    # A stream's events add up to what the plain call returns.
    assert calls[1]["response"]["choices"][0]["message"]["content"] == script.steps[0]["text"]
    assert calls[1]["usage"] == calls[0]["usage"]
    assert calls[3]["response"]["output"] == calls[2]["response"]["output"]


def _sse_events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


def test_the_proxy_records_anthropic_messages_streamed_and_not_with_tool_use_usage_and_tokens(tmp_path: Path) -> None:
    """Claude Code speaks Anthropic's Messages API: the proxy passes its SSE through event by
    event, adds a stream up into the message a plain call returns (tool_use input parsed from its
    JSON deltas, message_delta's stop reason and usage merged), records usage and the token data
    the upstream returned, and replaces x-api-key with its own key."""
    import httpx

    script = Script(({"tool": "Bash", "arguments": {"command": "echo héllo > out.txt"}}, {"text": "Done, héllo."}))
    model = serve_in_thread(ScriptedModel(script))
    writer = TraceWriter(tmp_path)
    proxy = serve_in_thread(
        CaptureProxy(
            f"{model.url}/v1",
            api_key="real-key",
            request_tokens=True,
            default=EpisodeTags(writer.add_call, episode_id="e1"),
        )
    )
    tools = [{"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {"command": {}}}}]
    first = {"model": "m", "max_tokens": 64, "tools": tools, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": "placeholder", "anthropic-version": "2023-06-01"}
    try:
        with httpx.Client(base_url=f"{proxy.url}/v1", headers=headers, timeout=60) as http:
            plain = http.post("/messages", json=first).json()
            streamed = http.post("/messages?beta=true", json={**first, "stream": True})
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = _sse_events(streamed.text)
            second = {**first, "messages": [*first["messages"], {"role": "assistant", "content": plain["content"]}]}
            text_plain = http.post("/messages", json=second).json()
            text_events = _sse_events(http.post("/messages", json={**second, "stream": True}).text)
            counted = http.post("/messages/count_tokens", json=first)  # forwarded, not recorded
    finally:
        proxy.stop()
        model.stop()
    assert plain["stop_reason"] == "tool_use" and plain["content"][0]["input"] == {"command": "echo héllo > out.txt"}
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[-1]["type"] == "message_stop"
    assert text_plain["content"] == [{"type": "text", "text": "Done, héllo."}]
    assert (
        "".join(e["delta"].get("text", "") for e in text_events if e["type"] == "content_block_delta") == "Done, héllo."
    )
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    calls = [decode_call(c) for c in read_trace(tmp_path)["calls"]]
    assert [(c["api"], c["stream"]) for c in calls] == [("messages", False), ("messages", True)] * 2
    for c in calls:
        assert c["status"] == 200 and c["error"] is None and c["episode_id"] == "e1"
        assert c["injected"] == {"return_token_ids": True}
        assert bytes(c["completion_token_ids"]).decode() == _generated(c)
        assert len(c["completion_logprobs"]) == len(c["completion_token_ids"])
        assert bytes(c["prompt_token_ids"]).decode() == _canonical(
            {"system": None, "messages": c["request"]["messages"]}
        )
        assert c["usage"]["output_tokens"] == len(c["completion_token_ids"]) and c["usage"]["input_tokens"] > 0
    # A stream adds up to what the plain call returned: content blocks, stop reason, usage.
    for plain_call, stream_call in (calls[0:2], calls[2:4]):
        for key in ("content", "stop_reason", "usage", "token_ids", "logprobs"):
            assert stream_call["response"][key] == plain_call["response"][key], key


def test_the_proxy_gives_anthropic_clients_anthropic_shaped_errors(tmp_path: Path) -> None:
    """An unreachable upstream and a malformed body reach a Messages API client in its own error
    shape (``{"type": "error", "error": {...}}``), and the failed call is still recorded."""
    import httpx

    writer = TraceWriter(tmp_path)
    proxy = serve_in_thread(CaptureProxy("http://127.0.0.1:9/v1", default=EpisodeTags(writer.add_call)))
    try:
        down = httpx.post(f"{proxy.url}/v1/messages", json={"model": "m", "messages": []}, timeout=60)
        bad = httpx.post(f"{proxy.url}/v1/messages", content=b"[not json", timeout=60)
    finally:
        proxy.stop()
    assert down.status_code == 502 and down.json()["type"] == "error"
    assert "unreachable" in down.json()["error"]["message"] and down.json()["error"]["type"] == "api_error"
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    [call] = read_trace(tmp_path)["calls"]
    assert call["api"] == "messages" and call["status"] == 502 and "unreachable" in call["error"]


def test_an_unreachable_upstream_is_a_502_and_still_recorded(tmp_path: Path) -> None:
    import httpx

    writer = TraceWriter(tmp_path)
    proxy = serve_in_thread(CaptureProxy("http://127.0.0.1:9/v1", default=EpisodeTags(writer.add_call)))
    try:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": []}, timeout=60)
        bad = httpx.post(f"{proxy.url}/v1/chat/completions", content=b"[not json", timeout=60)
        unknown = httpx.post(f"{proxy.url}/e/nope/v1/chat/completions", json={}, timeout=60)
    finally:
        proxy.stop()
    assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]
    assert bad.status_code == 400 and unknown.status_code == 404
    [call] = read_trace(tmp_path)["calls"]
    assert call["status"] == 502 and "unreachable" in call["error"]


def test_grpo_episode_mode_joins_calls_whose_prompts_extend_each_other(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path)
    base = dict.fromkeys(CALL_COLUMNS)
    calls = [([1, 2], [3, 4], [-0.1, -0.2]), ([1, 2, 3, 4, 9], [5], [-0.3])]
    for i, (p, c, lp) in enumerate(calls):
        tokens = {"prompt_token_ids": p, "completion_token_ids": c, "completion_logprobs": lp}
        w.add_call({**base, "episode_id": "e", "call_index": i, **tokens})
    w.add_episode({"episode_id": "e", "reward": 0.5})
    out = to_grpo(tmp_path, mode="episode")
    assert out["prompt_ids"] == [[1, 2]] and out["completion_ids"] == [[3, 4, 9, 5]]
    assert out["env_mask"] == [[1, 1, 0, 1]] and out["logprobs"] == [[-0.1, -0.2, 0.0, -0.3]]
    assert out["env_reward"] == [0.5]
    w.add_call({**base, "episode_id": "e", "call_index": 2, "prompt_token_ids": [7], "completion_token_ids": [8]})
    with pytest.raises(ValueError, match="does not extend"):
        to_grpo(tmp_path, mode="episode")


AGENT_PROGRAM = """
import json, os, subprocess, urllib.request
prompt = open(os.environ["OPENENV_PROMPT_FILE"]).read()
body = {"model": os.environ["OPENENV_MODEL"], "messages": [{"role": "user", "content": prompt}]}
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
    {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
code = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]
open("solution.py", "w").write(code)
subprocess.run(["envtool", "submit", "code=@solution.py"], check=True)
"""


def _serve_coding_env() -> tuple[str, Any]:
    """A coding_env gRPC server on loopback in a thread of its own; returns (address, stop)."""
    import threading

    server, loop, started = (
        openenv.Server(CodingEnvironment, "127.0.0.1", 0),
        asyncio.new_event_loop(),
        threading.Event(),
    )

    def run() -> None:
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(60)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)

    return server.address, stop


def _first_line(proc: Any, deadline_s: float = 60.0) -> str:
    import select
    import time

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            return str(proc.stderr.readline())
        assert proc.poll() is None, proc.stderr.read()
    raise AssertionError("no output within the deadline")


def test_the_cli_serves_the_scripted_model_and_runs_a_command_agent(tmp_path: Path) -> None:
    import subprocess
    import sys

    import httpx

    openenv_cli = [sys.executable, "-m", "openenv.cli"]
    (tmp_path / "script.json").write_text(json.dumps({"steps": [{"text": FIZZBUZZ}]}))
    (tmp_path / "agent.py").write_text(AGENT_PROGRAM)
    address, stop = _serve_coding_env()
    model = subprocess.Popen(
        [*openenv_cli, "harness", "scripted-model", "--script", str(tmp_path / "script.json"), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _first_line(model).split(" on ")[1].split()[0]
        run = [*openenv_cli, "harness", "run", address, "--task", "fizzbuzz", "--model-url", url]
        run += ["--out", str(tmp_path / "out"), "--request-tokens", "--time-budget", "300"]
        done = subprocess.run(
            [*run, "--agent", f"command:{sys.executable} {tmp_path / 'agent.py'}"],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1])["solved"] == 1
        assert "[1/1] fizzbuzz finished reward=1.000 solved=True calls=1" in done.stderr
        [call] = read_trace(tmp_path / "out")["calls"]
        assert bytes(call["completion_token_ids"]).decode() == FIZZBUZZ
        bad = subprocess.run([*run, "--agent", "nope"], capture_output=True, text=True, timeout=DEADLINE)
        assert bad.returncode == 2 and "unknown agent 'nope'" in bad.stderr
        missing = subprocess.run(
            [*run, "--agent", "codex", "--agent-bin", str(tmp_path / "no-such-codex")],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert missing.returncode == 1 and "is not an executable file" in missing.stderr
        # The proxy alone, for a harness run by hand: its calls go to OUT/calls.jsonl.
        by_hand_args = ["--upstream", url, "--port", "0", "--out", str(tmp_path / "p"), "--tag", "by-hand"]
        proxy = subprocess.Popen(
            [*openenv_cli, "harness", "proxy", *by_hand_args],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            base = _first_line(proxy).split(" on ")[1].split()[0]
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with httpx.stream("POST", f"{base}/chat/completions", json=body, timeout=60) as r:
                streamed = r.read().decode()
            assert streamed.endswith("data: [DONE]\n\n")
        finally:
            proxy.terminate()
            proxy.wait(60)
        [by_hand] = [decode_call(c) for c in read_trace(tmp_path / "p")["calls"]]
        assert by_hand["episode_id"] == "by-hand" and by_hand["stream"]
        assert by_hand["response"]["choices"][0]["message"]["content"] == FIZZBUZZ
    finally:
        model.terminate()
        model.wait(60)
        stop()


def test_the_cli_runs_claude_code_against_a_task_with_every_call_traced(tmp_path: Path) -> None:
    """`openenv harness run --agent claude-code`, as a user types it: Claude Code (the npm
    package, from .harness-tools/) solves fizzbuzz against the CLI's scripted model, every model
    call it made is in the trace (Messages API, streamed, with token ids), and the reward is the
    environment's."""
    import subprocess
    import sys

    exe = _npm_bin("claude")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("claude is not installed: make venv installs it under .harness-tools/")
        pytest.skip("claude not installed (make venv installs it under .harness-tools/ when npm is there)")
    openenv_cli = [sys.executable, "-m", "openenv.cli"]
    (tmp_path / "script.json").write_text(json.dumps({"steps": list(_script(TEXT_FINISH).steps)}))
    address, stop = _serve_coding_env()
    model = subprocess.Popen(
        [*openenv_cli, "harness", "scripted-model", "--script", str(tmp_path / "script.json"), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _first_line(model).split(" on ")[1].split()[0]
        run = [*openenv_cli, "harness", "run", address, "--task", "fizzbuzz", "--model-url", url, "--agent-bin", exe]
        run += ["--out", str(tmp_path / "out"), "--request-tokens", "--time-budget", "300", "--agent", "claude-code"]
        done = subprocess.run(run, capture_output=True, text=True, timeout=DEADLINE)
    finally:
        model.terminate()
        model.wait(30)
        stop()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["solved"] == 1, done.stderr
    trace = read_trace(tmp_path / "out")
    [episode] = trace["episodes"]
    assert episode["agent"] == "claude-code" and episode["reward"] == 1.0
    calls = [decode_call(c) for c in trace["calls"]]
    assert len(calls) == episode["calls"] == 4
    assert [c["call_index"] for c in calls] == list(range(4))
    for c in calls:
        assert (c["api"], c["stream"], c["status"]) == ("messages", True, 200)
        assert bytes(c["completion_token_ids"]).decode() == _generated(c)
