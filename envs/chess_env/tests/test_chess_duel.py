"""Chess agent against agent (ChessDuelEnvironment, RFC 0012) over a real gRPC server on loopback:
fool's mate in one self-play session, the same game between two clients (white here, black
joined with the world's token), illegal and out-of-turn moves refused. No engine involved."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import openenv
from chess_env import ChessDuelEnvironment

FOOLS_MATE = {"white": ["f3", "g2g4"], "black": ["e5", "Qh4#"]}  # SAN and UCI alike


def run(fn: Any) -> Any:
    async def main() -> Any:
        async with openenv.Server(ChessDuelEnvironment, "127.0.0.1", 0) as srv:
            return await fn(srv.address)

    return asyncio.run(asyncio.wait_for(main(), 120))


def test_self_play_fools_mate_rewards_black_and_refuses_bad_moves() -> None:
    async def go(url: str) -> tuple[Any, Any]:
        async with openenv.EnvClient(url) as env:
            r = await env.reset()
            assert r.to_act == ["white"] and r.agents["black"].observation["legal_moves"] == []
            assert "e2e4" in r.agents["white"].observation["legal_moves"]
            with pytest.raises(openenv.InvalidArgument, match="not a legal move"):
                await env.step("e2e5")  # illegal: refused, white still to act
            with pytest.raises(openenv.FailedPrecondition):
                await env.step("e7e5", agent_id="black")  # out of turn
            for white, black in zip(FOOLS_MATE["white"], FOOLS_MATE["black"], strict=True):
                r = await env.step(white)
                assert r.to_act == ["black"] and r.agents["black"].observation["last_move"]
                r = await env.step(black)
            return r, (await env.state()).state

    r, state = run(go)
    assert r.done and r.terminated and r.metadata == {"result": "0-1", "termination": "checkmate"}
    assert {a: s.reward for a, s in r.agents.items()} == {"white": -1.0, "black": 1.0}
    assert state["result"] == "0-1" and state["plies"] == 4


def test_two_clients_play_white_and_black() -> None:
    async def side(env: openenv.EnvClient, moves: list[str]) -> Any:
        (me,) = env.world.agent_ids
        r = await env.reset()
        while True:
            if not r.done and me not in r.to_act:
                r = await env.observe(wait=True)
            if r.done:
                return r
            r = await env.step(moves.pop(0))

    async def go(url: str) -> Any:
        async with openenv.EnvClient(url, agent_ids=["white"]) as white:
            async with openenv.EnvClient(url, join_token=white.world.join_token) as black:
                assert list(black.world.agent_ids) == ["black"]
                return await asyncio.gather(
                    side(white, list(FOOLS_MATE["white"])), side(black, list(FOOLS_MATE["black"]))
                )

    r_white, r_black = run(go)
    assert r_white.agents["white"].reward == -1.0 and set(r_white.agents) == {"white"}
    assert r_black.agents["black"].reward == 1.0 and set(r_black.agents) == {"black"}
