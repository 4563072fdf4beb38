"""Chess against the real Stockfish over a real gRPC server on loopback: full games to the
end (a random player loses to the engine), both colours, illegal moves refused, options
checked. Needs Debian's ``stockfish`` (.ci/run installs it); skipped with the reason, or
failed when CI is set, without it."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest

import openenv
from openenv import CallToolAction

try:
    from chess_env import ChessEnvironment, engine_path

    engine_path()
except RuntimeError as e:  # pragma: no cover - depends on the machine
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        raise
    pytest.skip(str(e), allow_module_level=True)


async def play_random_game(env: Any, seed: int, **options: Any) -> Any:
    rng = random.Random(seed)
    r = await env.reset(seed=seed, options=options)
    while not r.terminated:
        legal = (await env.step(CallToolAction("legal_moves", {}))).observation.result.data
        r = await env.step(CallToolAction("move", {"move": rng.choice(legal)}))
        assert not r.observation.result.is_error
    return r


def run(fn: Any, url: str | None = None, options: dict[str, Any] | None = None) -> Any:
    async def main() -> Any:
        if url is not None:
            async with openenv.ToolEnvClient(url, options=options) as env:
                return await fn(env)
        async with openenv.Server(ChessEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address, options=options) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), 300))


@pytest.mark.parametrize("color", ["white", "black"])
def test_a_random_player_plays_a_full_game_and_loses_to_stockfish(color: str) -> None:
    async def go(env: Any) -> Any:
        last = await play_random_game(env, 1, color=color, skill=20, movetime_ms=20)
        return last, await env.state()

    last, state = run(go)
    assert last.terminated and last.reward == -1.0
    assert state.state["result"] == ("0-1" if color == "white" else "1-0")


def test_illegal_moves_are_refused_and_the_game_goes_on() -> None:
    async def go(env: Any) -> Any:
        await env.reset()
        bad = await env.step(CallToolAction("move", {"move": "e2e5"}))
        good = await env.step(CallToolAction("move", {"move": "e4"}))  # SAN works too
        return bad, good

    bad, good = run(go)
    assert bad.observation.result.is_error and "e2e4" in bad.observation.result.text
    assert not good.observation.result.is_error and good.observation.result.data["played"] == "e2e4"
    assert good.observation.result.data["engine"]


def test_bad_options_are_refused() -> None:
    async def go(env: Any) -> Any:
        with pytest.raises(openenv.InvalidArgument):
            await env.reset(options={"skill": 99})
        return True

    assert run(go)


def test_render_draws_the_current_position_as_svg() -> None:
    env = ChessEnvironment()
    try:
        start = env.render()
        assert start.startswith("<svg") and "viewBox" in start
        env.reset(seed=3, options={"color": "white"})
        env.move("e4")
        after = env.render()
        assert after.startswith("<svg") and after != start  # a pawn moved (and the engine answered)
    finally:
        env.close()


def test_close_never_blocks_or_raises_whatever_the_engine_did() -> None:
    """close() returns at once and leaves no Stockfish behind: after a game, twice in a row,
    and when the engine process already died (python-chess's quit() raised then, and could
    wait forever on an engine loop that was ending: a CI run hung in close())."""
    for kill_first in (False, True):
        env = ChessEnvironment()
        env.reset(seed=1, options={"color": "white"})
        env.move("e4")  # the engine answers: it runs
        engine = env._engine
        assert engine is not None
        pid = engine.transport.get_pid()
        if kill_first:
            os.kill(pid, 9)
            engine.returncode.result(timeout=30)  # python-chess saw it die
        env.close()
        env.close()  # idempotent
        assert engine.returncode.result(timeout=30) is not None  # the process is gone (reaped)
