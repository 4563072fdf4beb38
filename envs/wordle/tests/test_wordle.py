"""The Wordle environment over a real gRPC server on loopback: the feedback rules, seeded
secrets, graded rewards (a fast solve, a slow one, partial credit), refused guesses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import openenv
from openenv import CallToolAction
from wordle import WordleEnvironment, answers, feedback, words


def run(fn: Callable[[Any], Awaitable[Any]], options: dict[str, Any] | None = None) -> Any:
    async def main() -> Any:
        async with openenv.Server(WordleEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address, options=options) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), 60))


def guess(word: str) -> CallToolAction:
    return CallToolAction("guess", {"word": word})


@pytest.mark.parametrize(
    ("g", "secret", "marks"),
    [
        ("crane", "crane", "GGGGG"),
        ("speed", "abide", "..Y.Y"),
        ("eerie", "there", "Y.Y.G"),
        ("hello", "world", "...GY"),
    ],
)
def test_feedback_marks_greens_first_and_repeated_letters_as_often_as_they_occur(
    g: str, secret: str, marks: str
) -> None:
    assert feedback(g, secret) == marks


def test_the_word_lists_ship_with_the_package() -> None:
    assert len(words()) > 5000 and len(answers()) > 100 and set(answers()) <= words()


def test_a_solve_scores_by_guesses_and_ends_the_episode() -> None:
    async def go(env: Any) -> Any:
        await env.reset(options={"word": "about"})
        first = await env.step(guess("about"))
        await env.reset(options={"word": "about"})
        await env.step(guess("above"))
        third = [await env.step(guess("agent")), await env.step(guess("about"))]
        return first, third[-1]

    first, slow = run(go)
    assert first.reward == 1.0 and first.terminated
    assert slow.reward == pytest.approx(1.0 - 0.5 * 2 / 5) and slow.terminated


def test_an_unsolved_game_gets_partial_credit_from_its_best_guess() -> None:
    async def go(env: Any) -> Any:
        await env.reset(options={"word": "about"})
        rs = [await env.step(guess(w)) for w in ("above", "zebra", "zebra", "zebra", "zebra", "zebra")]
        return rs

    rs = run(go)
    assert all(r.reward == 0.0 and not r.terminated for r in rs[:-1])
    assert rs[-1].terminated and rs[-1].reward == pytest.approx(0.4 * (2 * 3) / 10)
    assert rs[-1].observation.result.data["secret"] == "about"


def test_unknown_words_are_refused_without_using_a_guess() -> None:
    async def go(env: Any) -> Any:
        await env.reset(seed=1)
        bad = await env.step(guess("zzzzz"))
        return bad, await env.state()

    bad, state = run(go)
    assert bad.observation.result.is_error and not bad.terminated
    assert state.state["guesses"] == []


def test_seeds_draw_the_same_secret() -> None:
    async def go(env: Any) -> Any:
        out = []
        for s in (4, 4, 5):
            await env.reset(seed=s)
            out.append((await env.step(guess("about"))).observation.result.data["feedback"])
        return out

    a, b, _ = run(go)
    assert a == b
