#!/usr/bin/env python3
"""``make demo``: serve both reference environments and play one episode of each.

Without arguments it starts ``echo_env`` and ``gridworld`` as two server processes on
loopback (``openenv serve MODULE:Class --port 0 --ready-file F``), runs the client half
in a separate process (``demo.py --client ECHO_URL GRID_URL``) and stops the servers with
SIGTERM. It exits 0 when everything worked and non-zero, with the reason on stderr,
otherwise; the servers are stopped in every case, and every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SERVERS = {
    "echo_env": "echo_env.server:EchoEnvironment",
    "gridworld": "gridworld.server:GridWorldEnvironment",
}
START_TIMEOUT_S = 60.0  # a cold start imports grpc, protobuf, pydantic... on a busy 2-core machine
CLIENT_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
GRID_SEED = 7


class DemoError(Exception):
    """Something did not behave as the demo expects (``server``: the server at fault)."""

    def __init__(self, message: str, server: str = "") -> None:
        super().__init__(message)
        self.server = server


# --------------------------------------------------------------------------- servers


def _openenv_command() -> list[str]:
    script = Path(sys.executable).parent / "openenv"
    return [str(script)] if script.exists() else [sys.executable, "-m", "openenv.cli"]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _start(tmp: Path, procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]]) -> None:
    """Start every server, recording each in ``procs`` as soon as it runs."""
    for name, target in SERVERS.items():
        ready, log = tmp / f"{name}.address", tmp / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *_openenv_command(),
                    "serve",
                    target,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--ready-file",
                    str(ready),
                    "--grace",
                    "2",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        procs[name] = (proc, ready, log)


def _wait_ready(procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]]) -> dict[str, str]:
    urls: dict[str, str] = {}
    start = time.monotonic()
    deadline, report = start + START_TIMEOUT_S, start + 5.0
    while len(urls) < len(procs):
        for name, (proc, ready, log) in procs.items():
            if name in urls:
                continue
            if ready.exists():
                urls[name] = ready.read_text().strip()
            elif proc.poll() is not None:
                raise DemoError(f"the {name} server exited with code {proc.returncode}:\n{_tail(log)}", name)
        if time.monotonic() > deadline:
            late = ", ".join(n for n in procs if n not in urls)
            raise DemoError(f"server(s) not ready within {START_TIMEOUT_S:g} s: {late}")
        if time.monotonic() > report:  # a cold start on a busy machine: say what we wait for
            late = ", ".join(n for n in procs if n not in urls)
            print(f"  ... waiting for {late} to listen ({time.monotonic() - start:.0f} s)", flush=True)
            report += 5.0
        time.sleep(0.05)
    return urls


def _stop(procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]], reported: set[str]) -> list[str]:
    """SIGTERM every server, wait (bounded), SIGKILL stragglers. Returns the problems
    found, except for the servers in ``reported``."""
    problems = []
    for proc, _, _ in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for name, (proc, _, log) in procs.items():
        try:
            code = proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            problems.append(f"the {name} server ignored SIGTERM for {STOP_TIMEOUT_S:g} s and was killed")
            continue
        if code != 0 and name not in reported:
            problems.append(f"the {name} server exited with code {code}:\n{_tail(log)}")
    return problems


def supervise() -> int:
    """Start the servers, run the client process, stop the servers."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    problems: list[str] = []
    reported: set[str] = set()
    procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}
    with tempfile.TemporaryDirectory(prefix="openenv-demo-") as tmp:
        try:
            print(f"openenv demo: starting {' and '.join(SERVERS)} (openenv serve MODULE:Class --port 0)", flush=True)
            _start(Path(tmp), procs)
            urls = _wait_ready(procs)
            print("openenv demo: two reference environments, served over gRPC on loopback")
            for name in SERVERS:
                url = urls[name]
                print(f"  {name:<10} {url}  (pid {procs[name][0].pid})", flush=True)  # before the client's output
            print("starting the client process (it imports the clients, then plays one episode of each)", flush=True)
            try:
                client = subprocess.run(
                    [sys.executable, __file__, "--client", urls["echo_env"], urls["gridworld"]],
                    stdin=subprocess.DEVNULL,
                    timeout=CLIENT_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                problems.append(f"the client process did not finish within {CLIENT_TIMEOUT_S:g} s")
            else:
                if client.returncode != 0:
                    problems.append(f"the client process failed (exit code {client.returncode})")
        except DemoError as e:
            problems.append(str(e))
            reported.add(e.server)
        except OSError as e:  # e.g. the openenv command is missing
            problems.append(f"cannot start a server: {e}")
        except KeyboardInterrupt:
            problems.append("interrupted")
        finally:
            problems += _stop(procs, reported)
    if problems:
        print("demo failed:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print("servers stopped (SIGTERM); demo OK")
    return 0


# --------------------------------------------------------------------------- client


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise DemoError(what)


async def echo_episode(url: str) -> None:
    """The quick start: reset, then two tool-call steps."""
    from echo_env import CallToolAction, EchoEnv

    print("\n== echo_env: the quick start ==")
    async with EchoEnv(base_url=url, timeout=10.0, connect_timeout=10.0) as client:
        result = await client.reset()
        message = result.observation.metadata.get("message")
        print(f"  reset                                -> {json.dumps(message)}")
        _expect(message == "Echo environment ready!", f"unexpected reset message {message!r}")
        for tool, text in (("echo_message", "Hello, World!"), ("echo_with_length", "openenv")):
            result = await client.step(CallToolAction(tool_name=tool, arguments={"message": text}))
            data = result.observation.result["data"]
            call = f"{tool}({text!r})"
            print(f"  step {call:<31} -> {json.dumps(data, sort_keys=True)}  reward {result.reward:.2f}")
            _expect(
                result.reward is not None and abs(result.reward - 0.1 * len(text)) < 1e-9,
                f"unexpected reward {result.reward} for {call}",
            )
        st = await client.state()
        print(f"  state: step_count={st.step_count}, status={st.status.name}, env state={st.state}")
        _expect(st.step_count == 2, f"expected 2 steps, the server counted {st.step_count}")


def _render(grid: list[str], trail: set[tuple[int, int]] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The grid with floor as blanks and the cells walked through as '*'."""
    return [
        "".join("*" if (r, c) in trail and ch == "." else " " if ch == "." else ch for c, ch in enumerate(row))
        for r, row in enumerate(grid)
    ]


async def gridworld_episode(url: str, seed: int) -> None:
    """One episode with a breadth-first-search policy (re-planned from every observation)."""
    from gridworld import Action, GridWorldEnv, Move
    from gridworld.maze import shortest_path

    def policy(obs: Any) -> int:
        return shortest_path(list(obs.grid), (obs.agent.row, obs.agent.col), (obs.goal.row, obs.goal.col))[0]

    async with GridWorldEnv(url, timeout=10.0, connect_timeout=10.0) as env:
        result = await env.reset(seed=seed)
        start = result.observation
        height, width = len(start.grid), len(start.grid[0])
        print(f"\n== gridworld: seed {seed}, {height}x{width} maze, BFS policy ==")
        print(
            f"  agent A at ({start.agent.row},{start.agent.col}), goal G at ({start.goal.row},{start.goal.col}), "
            f"{result.metadata['distance_to_goal']} moves apart"
        )
        trail = {(start.agent.row, start.agent.col)}
        total = 0.0
        while not result.done:
            move = policy(result.observation)
            result = await env.step(Action(move=move))
            obs = result.observation
            trail.add((obs.agent.row, obs.agent.col))
            total += result.reward or 0.0
            flags = " ".join(
                f
                for f, on in (
                    ("bumped", obs.bumped),
                    ("terminated", result.terminated),
                    ("truncated", result.truncated),
                )
                if on
            )
            print(
                f"  step {result.step_count:>2}  {Move.Name(move).removeprefix('MOVE_'):<5}  "
                f"reward {result.reward:+.2f}  distance {result.metadata['distance_to_goal']:>2}  {flags}".rstrip()
            )
        st = await env.state()
        print(
            f"  return {total:+.2f} in {st.step_count} steps; state: status={st.status.name}, "
            f"seed={st.state.seed}, total_reward={st.state.total_reward:+.2f}"
        )
        print(f"  {'start':<{width + 4}}end")
        for a, b in zip(_render(list(start.grid)), _render(list(result.observation.grid), trail), strict=True):
            print(f"  {a}    {b}")
        _expect(result.terminated, "the BFS policy did not reach the goal")
        _expect(abs(st.state.total_reward - total) < 1e-6, f"state total_reward {st.state.total_reward} != {total}")


async def play(echo_url: str, grid_url: str) -> None:
    await echo_episode(echo_url)
    await gridworld_episode(grid_url, GRID_SEED)


def client_main(echo_url: str, grid_url: str) -> int:
    import openenv

    try:
        asyncio.run(asyncio.wait_for(play(echo_url, grid_url), CLIENT_TIMEOUT_S / 2))
    except (DemoError, openenv.EnvError, TimeoutError) as e:
        print(f"client: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--client",
        nargs=2,
        metavar=("ECHO_URL", "GRID_URL"),
        help="only play the episodes against servers already running at these URLs",
    )
    ns = ap.parse_args(argv)
    if ns.client:
        return client_main(*ns.client)
    return supervise()


if __name__ == "__main__":
    sys.exit(main())
