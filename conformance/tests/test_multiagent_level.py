"""The ``multiagent`` level (RFC 0012, RFC 0016) on healthy worlds: the reference games certify, and a
single-agent environment skips it. (Each check's mutant is in ``mutants/multiagent_*``.)

The games are served by an ``openenv.Server`` on its own event loop in a thread (127.0.0.1,
port 0), certified over gRPC like any running server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import pytest
from mutants.base import Counter

import openenv
from openenv.games import HighCard, RockPaperScissors, TicTacToe
from openenv_conformance.context import RunOptions
from openenv_conformance.runner import certify

OPTIONS = RunOptions(seed=20261202, max_examples=10)
CHECKS = {
    "multiagent.turn_order",
    "multiagent.views_private",
    "multiagent.reward_sum",
    "multiagent.joins",
    "multiagent.wait_deadlines",  # RFC 0016
    "multiagent.seat_events",
}


@contextlib.contextmanager
def served(factory: type[openenv.Environment]) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    srv = openenv.Server(factory, "127.0.0.1", 0)
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        started.set()
        loop.run_forever()

    t = threading.Thread(target=run, name="multiagent-server", daemon=True)
    t.start()
    assert started.wait(30), "the server did not start"
    try:
        yield srv.address
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        t.join(30)
        loop.close()


@pytest.mark.parametrize("game", [TicTacToe, RockPaperScissors, HighCard], ids=lambda c: c.__name__)
def test_the_reference_games_certify_at_the_multiagent_level(game: type[openenv.MultiAgentEnvironment]) -> None:
    with served(game) as url:
        report = certify(url, levels=["multiagent"], run_options=OPTIONS)
    assert report.exit_code == 0, [(r.id, r.reason) for r in report.results if not r.ok]
    passed = {r.id for r in report.results if r.status == "pass"}
    expected = CHECKS - ({"multiagent.turn_order"} if game.simultaneous else set())
    assert passed == expected, {r.id: (r.status, r.reason) for r in report.results}


def test_a_single_agent_environment_skips_the_level() -> None:
    with served(Counter) as url:
        report = certify(url, levels=["multiagent"], run_options=OPTIONS)
    assert {r.id for r in report.results} == CHECKS
    assert all(r.status == "skip" and "one agent" in r.reason for r in report.results), report.results
