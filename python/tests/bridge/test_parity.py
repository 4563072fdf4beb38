"""Parity: the same seeded actions give identical results over gRPC, over the HTTP side
of the same server, and over ``openenv bridge`` in front of it (a remote gRPC server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bridge_envs import RandomWalk
from bridge_kit import HERE, env_with_path, served, stop, wait_file_async
from google.protobuf import json_format
from google.protobuf.message import Message

import openenv

pytestmark = pytest.mark.anyio


def _norm(v: Any) -> Any:
    if isinstance(v, Message):
        return json_format.MessageToDict(v, preserving_proto_field_name=True)
    return v


async def _episode_log(url: str, actions: list[Any], seeds: tuple[int, ...]) -> list[Any]:
    log: list[Any] = []
    async with openenv.EnvClient(url, options={}) as env:
        log.append(("info", env.info.name, env.info.action.kind, env.info.observation.message_type))
        for seed in seeds:
            r = await env.reset(seed=seed, episode_id=f"ep-{seed}")
            log.append(
                (
                    "reset",
                    _norm(r.observation),
                    r.reward,
                    r.terminated,
                    r.truncated,
                    r.metadata,
                    r.episode_id,
                    r.step_count,
                )
            )
            for a in actions:
                try:
                    r = await env.step(a)
                except openenv.EnvError as e:
                    log.append(("error", e.code.name, e.fatal))
                    continue
                log.append(
                    (
                        "step",
                        _norm(r.observation),
                        r.reward,
                        r.terminated,
                        r.truncated,
                        r.metadata,
                        r.episode_id,
                        r.step_count,
                    )
                )
            st = await env.state()
            log.append(("state", st.episode_id, st.step_count, st.status.name, _norm(st.state)))
    return log


def _actions(env: str) -> list[Any]:
    if env == "random_walk":
        return [{"move": m} for m in (1, -1, 2, 9, 0, 3, -3, 1, 1, 1, 2, 2, 2, 2, 2)]
    from gridworld.v1 import gridworld_pb2

    moves = [1, 4, 2, 2, 3, 4, 4, 2, 1, 0, 4, 2]  # 0 = MOVE_UNSPECIFIED: INVALID_ARGUMENT
    return [gridworld_pb2.Action(move=m) for m in moves]


def _factory(env: str) -> Any:
    if env == "random_walk":
        return RandomWalk
    try:
        from gridworld.server import GridWorldEnvironment
    except ImportError as e:  # pragma: no cover - the envs are installed by `make venv`
        pytest.skip(f"gridworld is not installed: {e}")
    return GridWorldEnvironment


@pytest.mark.parametrize("env", ["random_walk", "gridworld"])
async def test_grpc_and_websocket_give_identical_results(env: str, tmp_path: Path) -> None:
    actions, seeds = _actions(env), (3, 11)
    async with served(_factory(env)) as srv:
        over_grpc = await _episode_log(srv.address, actions, seeds)
        over_http = await _episode_log(srv.http_url, actions, seeds)
        ready = tmp_path / "bridge.url"
        proc = subprocess.Popen(
            [sys.executable, "-m", "openenv.cli", "bridge", srv.address, "--port", "0", "--ready-file", str(ready)],
            env=env_with_path(HERE),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            over_bridge = await _episode_log(await wait_file_async(ready, proc), actions, seeds)
        finally:
            stop(proc)
    assert any(e[0] == "error" for e in over_grpc), "the sequence includes an invalid action"
    assert any(e[0] == "step" for e in over_grpc)
    assert over_http == over_grpc
    assert over_bridge == over_grpc
