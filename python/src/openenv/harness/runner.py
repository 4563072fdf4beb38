"""The harness runner: an agent harness plays tasks of an environment, every model call captured.

For each task, :func:`run_harness`

1. opens a session on the environment (``TARGET``: ``grpc://``, ``http(s)://`` or
   ``docker:IMAGE``) and resets it to the task (RFC 0004 ``task_id``);
2. gives the agent an empty workspace directory, the reset observation's text as its prompt,
   and the environment's tools as ``envtool`` on its ``PATH`` (each call a step of the session:
   counted, rewarded, recorded);
3. points the agent at the capture proxy (:mod:`openenv.harness.proxy`), whose episode URL
   tags every call with the run, episode, session and task, and forwards to ``model_url``;
4. runs the agent, in its jail (:mod:`openenv.harness.jail`: its own PID and network namespaces,
   the environments' packages, tasks and the run's other files hidden, a reduced environment)
   unless ``jail=None``, to completion or until ``time_budget_s`` (then its process group is
   killed);
5. scores the episode with the environment's rewards (the sum over its steps; ``solved`` when
   the environment ended it at the top of its reward range) and writes the trace:
   ``runs.jsonl``, ``calls.jsonl``, ``steps.jsonl``, ``episodes.jsonl`` (:mod:`openenv.harness.trace`).

``concurrency`` episodes run at once, each with its own session, workspace and proxy URL, on one
proxy. The proxy and the tool relay listen on loopback only (and, for jailed agents, on a UNIX
socket in a private directory, which each jail brings in as its own loopback port).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openenv.client import ToolEnvClient
from openenv.harness._asgi import LoopbackServer, UnixServer
from openenv.harness.agents import Agent, AgentContext
from openenv.harness.jail import DEFAULT_JAIL, Jail
from openenv.harness.proxy import CaptureProxy, EpisodeTags
from openenv.harness.relay import EpisodeTools, HarnessApp
from openenv.harness.trace import TraceWriter
from openenv.protocol import StepResult
from openenv.record.recorder import EpisodeLog

__all__ = ["run_harness"]

ENVTOOL = Path(__file__).with_name("envtool.py")
LOG_TAIL = 64 * 1024
TOOLS_HINT = (
    "\n\nYour workspace is the current directory. The environment's tools are the command {envtool} "
    "(also `envtool` on PATH, and in $OPENENV_ENVTOOL): `envtool list` shows them; call one with "
    "`envtool NAME key=value ...` (`key=@file` passes a file's text), e.g. `{example}`."
)


def _tool_example(tools: Sequence[Mapping[str, Any]]) -> str:
    """An ``envtool`` call of this environment's own tools for the prompt: the first tool with a
    required string argument, that argument passed from a file (never another environment's tool)."""
    for t in tools:
        schema = t.get("inputSchema") or {}
        props = schema.get("properties") or {}
        for arg in schema.get("required") or ():
            if (props.get(arg) or {}).get("type") == "string":
                return f"envtool {t['name']} {arg}=@{arg}.txt"
    return f"envtool {tools[0]['name']}" if tools else "envtool list"


def _client(target: str, **kwargs: Any) -> ToolEnvClient:
    if target.startswith("docker:"):
        out = ToolEnvClient.from_docker_image(target.removeprefix("docker:"), **kwargs)
        assert isinstance(out, ToolEnvClient)
        return out
    return ToolEnvClient(target, **kwargs)


def _prompt_text(r: StepResult[Any]) -> str:
    result = getattr(r.observation, "result", None)
    if result is not None:
        return str(result.text)
    return r.observation if isinstance(r.observation, str) else json.dumps(r.observation, default=str)


def _write_envtool(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "envtool"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{ENVTOOL}" "$@"\n', encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _version() -> str:
    try:
        return importlib.metadata.version("protoenv")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


async def run_harness(
    target: str,
    agent: Agent,
    tasks: Sequence[str | None],
    model_url: str,
    out: str | Path,
    *,
    model: str = "default",
    concurrency: int = 1,
    time_budget_s: float = 900.0,
    request_tokens: bool = False,
    upstream_api_key: str | None = None,
    client_kwargs: Mapping[str, Any] | None = None,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
    jail: Jail | None = DEFAULT_JAIL,
    sampling: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``agent`` on each of ``tasks`` (``None``: the environment's default reset) of the
    environment at ``target``, capturing its calls to ``model_url``; write the trace to the
    directory ``out`` and return the episode rows (``on_episode`` gets each as it ends).

    Every agent runs in ``jail`` (:class:`~openenv.harness.jail.Jail`; the default hides what
    every run must, ``Jail(hide=[...])`` more). ``jail=None`` runs it unconfined, as the
    runner's user with its environment: for an agent you trust only, never for training, since
    its shell can then read the environment's tasks and solutions and open sessions of its own.
    Raises :class:`~openenv.harness.jail.JailUnavailable` before any session opens when
    bubblewrap is missing or cannot build the jail here.

    ``sampling`` pins a trainer's sampling policy (``temperature`` and the knobs that would
    truncate the distribution): the proxy sets them in every call the agent makes, whatever the
    harness asked for, so the captured logprobs are the policy's (RFC 0017)."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if time_budget_s <= 0:
        raise ValueError("time_budget_s must be > 0")
    agent.check()  # a missing program fails the run before any session opens
    if jail is not None:
        jail.check()  # so does a jail that cannot be built: never an agent run unconfined by accident
    out = Path(out).resolve()
    writer = TraceWriter(out)
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    writer.add_run(
        {
            "run_id": run_id, "target": target, "agent": agent.name, "model": model, "model_url": model_url,
            "tasks": list(tasks), "concurrency": concurrency, "time_budget_s": time_budget_s,
            "request_tokens": request_tokens, "started_at": time.time(), "protoenv": _version(),
            "jail": None if jail is None else json.dumps(jail.describe()),
        }
    )  # fmt: skip
    proxy = CaptureProxy(model_url, api_key=upstream_api_key, request_tokens=request_tokens, sampling=sampling)
    app = HarnessApp(proxy)
    await app.start()
    server = LoopbackServer(app, "127.0.0.1", 0)
    socket_dir: str | None = None
    unix: UnixServer | None = None
    try:
        await server.start()
        if jail is not None and not jail.share_net:
            # A directory only this user may enter; each jail mounts the socket in, read-only.
            socket_dir = tempfile.mkdtemp(prefix="openenv-harness-")
            if len(socket_dir) > 90:  # a UNIX socket's path holds at most 107 bytes
                os.rmdir(socket_dir)
                socket_dir = tempfile.mkdtemp(prefix="openenv-harness-", dir="/tmp")
            unix = await UnixServer(app, os.path.join(socket_dir, "harness.sock")).start()
    except BaseException:
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
        await server.stop()
        await app.stop()
        raise
    hidden = jail.hidden(out) if jail is not None else []
    warned: list[bool] = []
    queue: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
    for item in enumerate(tasks):
        queue.put_nowait(item)
    rows: list[dict[str, Any]] = []

    async def play(index: int, task_id: str | None) -> dict[str, Any]:
        episode_id = f"{run_id}-{index:06d}"
        key = uuid.uuid4().hex
        root = out / "workspaces" / episode_id
        workspace, home, bin_dir = root / "work", root / "agent", root / "bin"
        for d in (workspace, home):
            d.mkdir(parents=True, exist_ok=True)
        _write_envtool(bin_dir)
        log_path = root / "agent.log"
        row: dict[str, Any] = {
            "run_id": run_id, "episode_id": episode_id, "session_id": None, "task_id": task_id,
            "agent": agent.name, "reward": 0.0, "solved": False, "status": "error", "calls": 0,
            "agent_exit_code": None, "error": None, "started_at": time.time(), "duration_s": 0.0,
            "workspace": str(workspace), "log": "",
        }  # fmt: skip
        t0 = time.perf_counter()
        tags = EpisodeTags(writer.add_call, run_id, episode_id, "", task_id, agent.name)
        elog = EpisodeLog(index, None, task_id, agent.name)
        try:
            env = _client(target, **dict(client_kwargs or {}))
            async with env:
                info = env.info
                if jail is not None and jail.share_net and not warned:
                    caps = info.capabilities if info is not None else None
                    if caps is None or not caps.auth_required:
                        warned.append(True)
                        warnings.warn(
                            f"{target} accepts sessions without a token, and the agents share this machine's "
                            "network (share_net): an agent can open sessions of its own there and try answers "
                            "before it submits. Serve the environment with a token (docs/harnesses.md).",
                            RuntimeWarning,
                            stacklevel=1,
                        )
                row["session_id"] = tags.session_id = env.session_id
                tools = [
                    {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                    for t in await env.list_tools()
                ]
                p0, w0 = time.perf_counter(), time.time()
                first = await env.reset(None, episode_id, task_id=task_id)
                elog.add(first, None, w0, time.perf_counter() - p0, has_action=False)
                episode = EpisodeTools(env, elog, tools)
                episode.done = first.done
                hint = TOOLS_HINT.format(envtool=bin_dir / "envtool", example=_tool_example(tools))
                prompt = _prompt_text(first) + hint
                (home / "prompt.txt").write_text(prompt, encoding="utf-8")
                proxy.register(key, tags)
                app.episodes[key] = episode
                ctx = AgentContext(
                    workspace,
                    home,
                    f"{server.url}/e/{key}/v1",
                    model,
                    prompt,
                    f"{server.url}/e/{key}/tools",
                    bin_dir,
                    f"{server.url}/e/{key}/mcp",
                )
                try:
                    launch = agent.launch(ctx)
                    if jail is not None:
                        sock = None if unix is None else unix.path
                        launch = jail.wrap(launch, ctx, hidden=hidden, port=server.port, socket_path=sock)
                    with log_path.open("wb") as logf:
                        proc = await asyncio.create_subprocess_exec(
                            *launch.argv,
                            cwd=str(launch.cwd),
                            env=launch.env,
                            stdin=asyncio.subprocess.DEVNULL,
                            stdout=logf,
                            stderr=asyncio.subprocess.STDOUT,
                            start_new_session=True,
                        )
                        try:
                            row["agent_exit_code"] = await asyncio.wait_for(proc.wait(), time_budget_s)
                            status = "finished" if episode.done else "unfinished"
                        except TimeoutError:
                            status = "timeout"
                            _kill_group(proc.pid)
                            row["agent_exit_code"] = await proc.wait()
                        finally:
                            _kill_group(proc.pid)  # whatever the agent left running
                    # Calls still in flight (an agent killed mid-answer) are recorded when they end.
                    deadline = time.monotonic() + 60
                    while tags.finished < tags.started and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)
                finally:
                    proxy.unregister(key)
                    app.episodes.pop(key, None)
                async with episode.lock:
                    if status == "timeout" and episode.done:
                        status = "finished"
                    steps = elog.finish()
                    writer.add_steps(steps)
                    reward = elog.total_reward
                    caps = info.capabilities if info is not None else None
                    top = caps.reward_max if caps is not None and caps.HasField("reward_max") else None
                    last = episode.last
                    terminated = bool(last is not None and last.terminated)
                    row.update(
                        status=status,
                        reward=reward,
                        solved=terminated and (reward >= top - 1e-9 if top is not None else reward > 0),
                    )
        except Exception as e:  # noqa: BLE001 - one episode's failure is reported in its row; the run goes on
            row["error"] = f"{type(e).__name__}: {e}"
            row["status"] = "error"
        row["calls"] = tags.finished
        row["duration_s"] = time.perf_counter() - t0
        row["log"] = _tail(log_path)
        if jail is not None and row["agent_exit_code"] not in (0, None) and row["log"].startswith("bwrap: "):
            # bubblewrap refused this episode's jail: the agent never ran, which its row must say.
            row["status"] = "error"
            row["error"] = f"the agent's jail could not start: {row['log'].splitlines()[0]}"
        writer.add_episode(row)
        return row

    async def worker() -> None:
        while True:
            try:
                index, task_id = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            row = await play(index, task_id)
            rows.append(row)
            if on_episode is not None:
                on_episode(row)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(tasks))))))
    finally:
        if unix is not None:
            await unix.stop()
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
        await server.stop()
        await app.stop()
        await proxy.aclose()
    rows.sort(key=lambda r: str(r["episode_id"]))
    return rows
