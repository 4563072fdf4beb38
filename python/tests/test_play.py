"""``openenv play``: a person plays an environment in a terminal, from its schema alone.

Driven through a pseudo-terminal (pexpect), as a person would: the gridworld's ``move`` enum
is offered as numbered choices; the test walks the seeded maze to the goal and checks the
reward and return printed are the protocol's (the same seeded episode played over gRPC).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from openenv_testkit import REPO_ROOT

import openenv
from gridworld import Action, Move
from gridworld.maze import shortest_path

WAIT_S = 60.0
SEED = 11


def gridworld_env() -> type[openenv.Environment]:
    from gridworld.server import GridWorldEnvironment

    return GridWorldEnvironment


@contextlib.contextmanager
def _playing(*args: str, cwd: Path = REPO_ROOT) -> Iterator[pexpect.spawn]:
    """``openenv play ARGS`` in a pseudo-terminal, for the block to drive and end: the game must
    then have exited with status 0."""
    child = _spawn(*args, cwd=cwd)
    try:
        yield child
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def _spawn(*args: str, cwd: Path = REPO_ROOT) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "openenv.cli", "play", *args],
        cwd=str(cwd),
        encoding="utf-8",
        timeout=WAIT_S,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR", "TERM": "dumb", "PYTHONUNBUFFERED": "1"},
        dimensions=(50, 200),
    )
    return child


@pytest.mark.anyio
async def test_a_gridworld_episode_is_played_to_the_goal_in_a_terminal() -> None:
    # The protocol's episode: the moves to the goal and their rewards, over gRPC.
    async with openenv.Host(gridworld_env(), "127.0.0.1", 0) as host:
        assert host.address is not None
        async with openenv.EnvClient(host.address) as env:
            obs = (await env.reset(seed=SEED)).observation
            moves = shortest_path(list(obs.grid), (obs.agent.row, obs.agent.col), (obs.goal.row, obs.goal.col))
            rewards = [(await env.step(Action(move=m))).reward for m in moves]
    names = ["MOVE_UP", "MOVE_DOWN", "MOVE_LEFT", "MOVE_RIGHT"]  # the order the prompt numbers them

    with _playing("gridworld.server:GridWorldEnvironment", "--seed", str(SEED)) as child:
        child.expect(r"playing gridworld 0\.1\.0 \(session [0-9a-f]+\)")
        child.expect(r"step=0 reward=- return=0 terminated=False truncated=False")
        ret = 0.0
        for i, m in enumerate(moves):
            child.expect_exact(">")
            child.sendline("s")
            child.expect_exact("1) MOVE_UP  2) MOVE_DOWN  3) MOVE_LEFT  4) MOVE_RIGHT")
            # By number or by name, as a person would type either.
            child.sendline(str(names.index(Move.Name(m)) + 1) if i % 2 else Move.Name(m).lower())
            child.expect(r"step=(\d+) reward=(\S+) return=(\S+) terminated=(\w+) truncated=(\w+)")
            step, reward, shown_return, terminated, _ = child.match.groups()
            ret += rewards[i]
            assert int(step) == i + 1
            assert float(reward) == pytest.approx(rewards[i], abs=1e-6)
            assert float(shown_return) == pytest.approx(ret, abs=1e-5)
            assert terminated == str(i == len(moves) - 1)
        child.expect_exact("episode over")
        child.sendline("t")
        child.expect(r'"status": "TERMINATED"')
        child.sendline("q")
        child.expect(pexpect.EOF)


@pytest.mark.anyio
async def test_moves_typed_as_words_reach_the_goal_and_enter_then_ends_the_game() -> None:
    """``left`` for MOVE_LEFT (the words after the names' shared prefix), as a person types a
    move; once the episode is over, Enter ends the game cleanly (exit 0) and ``s`` is answered
    locally: before, ``left`` was refused, and the Enter after the episode asked for a move and
    printed the server's FAILED_PRECONDITION."""
    async with openenv.Host(gridworld_env(), "127.0.0.1", 0) as host:
        assert host.address is not None
        async with openenv.EnvClient(host.address) as env:
            obs = (await env.reset(seed=SEED)).observation
            moves = shortest_path(list(obs.grid), (obs.agent.row, obs.agent.col), (obs.goal.row, obs.goal.col))
    with _playing("gridworld.server:GridWorldEnvironment", "--seed", str(SEED)) as child:
        for i, m in enumerate(moves):
            child.expect_exact(">")
            child.sendline("s")
            child.expect_exact("4) MOVE_RIGHT")
            word = Move.Name(m).removeprefix("MOVE_").lower()
            child.sendline(word if i % 2 else word.upper())
            child.expect(r"step=(\d+) reward=")
            assert int(child.match.group(1)) == i + 1
        child.expect_exact("episode over: r [seed] plays another, q (or Enter) quits")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("the episode is over: r [seed] plays another")
        child.expect_exact(">")
        child.sendline("")
        child.expect(pexpect.EOF)
        assert "error" not in (child.before or "").lower()


def test_a_bad_or_empty_answer_is_asked_again_q_quits_anywhere_and_a_bad_target_is_an_error() -> None:
    with _playing("gridworld.server:GridWorldEnvironment", "--seed", "1") as child:
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("4) MOVE_RIGHT")
        child.sendline("9")
        child.expect(re.escape("pick 1-4 or one of: MOVE_UP, MOVE_DOWN, MOVE_LEFT, MOVE_RIGHT"))
        child.sendline("")  # Enter: no move chosen, which must not be sent as MOVE_UNSPECIFIED
        child.expect_exact("pick 1-4 or one of: MOVE_UP, MOVE_DOWN, MOVE_LEFT, MOVE_RIGHT (q quits)")
        child.sendline("2")
        child.expect(r"step=1 reward=")
        assert "error" not in (child.before or "")
        child.expect_exact(">")
        child.sendline("")  # Enter at the command prompt: a step
        child.expect_exact("4) MOVE_RIGHT")
        child.sendline("q")  # at the move prompt: quits, is not sent as a move
        child.expect(pexpect.EOF)
        assert "step=2" not in (child.before or "")
    bad = _spawn("grpc://127.0.0.1:1", "--connect-timeout", "1")
    bad.expect(pexpect.EOF)
    bad.close()
    assert bad.exitstatus == 1
    assert "cannot connect" in (bad.before or "")


def test_a_text_board_prints_as_its_lines_and_q_quits_where_backslash_q_sends_q() -> None:
    with _playing("play_envs:Board", cwd=Path(__file__).parent) as child:
        # The board as it reads, line under line (not one escaped JSON string).
        child.expect_exact("observation:\r\n  +---+\r\n  |x.o|\r\n  |.x.|\r\n  +---+\r\n  last move: -")
        child.expect_exact(">")
        child.sendline("")
        child.expect_exact("action:")
        child.sendline("")  # no text: asked again, nothing sent
        child.expect_exact("type some text (q quits; \\q sends a q)")
        child.sendline("\\q")  # a literal q
        child.expect_exact("last move: q")
        child.expect(r"step=1 reward=1 return=1 terminated=False")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("action:")
        child.sendline("q")
        child.expect(pexpect.EOF)
        assert "step=2" not in (child.before or "")


def test_tool_results_print_as_their_text_and_a_tool_without_arguments_asks_nothing() -> None:
    with _playing("play_envs:Notes", cwd=Path(__file__).parent) as child:
        child.expect_exact("observation:\r\n  Take notes.\r\n  Tools: add, show.")
        for note in ("first", "second"):
            child.expect_exact(">")
            child.sendline("s")
            child.expect_exact("tools: 1) add  2) show")
            child.sendline("add")
            child.expect_exact("text:")
            child.sendline(note)
        child.expect_exact("observation:\r\n  tool: add\r\n  result: 2 notes")
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("tools: 1) add  2) show")
        child.sendline("2")  # show() takes nothing: no "(JSON)" prompt for {}
        child.expect_exact("observation:\r\n  tool: show\r\n  result:\r\n    first\r\n    second\r\n")
        assert "(JSON)" not in (child.before or "")
        child.expect(r"step=3 reward=")
        child.sendline("q")
        child.expect(pexpect.EOF)


def test_a_tools_arguments_are_asked_required_first_in_the_order_of_its_signature() -> None:
    """A tool's schema crosses the wire as a Struct, whose members have no order (upb's differs
    from one process to the next): play asks the required arguments in the schema's
    ``required`` order, which is the signature's, and the optional ones after them."""
    with _playing("play_envs:Contacts", cwd=Path(__file__).parent) as child:
        child.expect_exact(">")
        child.sendline("s")
        child.expect_exact("tools: 1) save")
        child.sendline("1")
        for field, value in (("name", "Ada"), ("phone", "0"), ("city", "London"), ("note", "")):
            child.expect(r"(name|phone|city|note): ")
            assert child.match.group(1) == field
            child.sendline(value)
        child.expect_exact("result: Ada, 0, London\r\n")
        child.expect(r"step=1 reward=")
        child.sendline("q")
        child.expect(pexpect.EOF)


# Multi-agent environments (RFC 0012): self-play in one terminal, or one seat per terminal.

TTT = "openenv.games:TicTacToe"


def _act(child: pexpect.spawn, agent: str, action: int) -> None:
    """At the command prompt: act for ``agent``, which the terminal names as the one to act."""
    child.expect_exact(">")
    child.sendline("")
    child.expect_exact(f"{agent} to act")
    child.expect_exact("action")
    child.sendline(str(action))


def test_tic_tac_toe_self_play_names_the_agent_to_act_shows_only_its_view_and_refuses_a_taken_cell() -> None:
    with _playing(TTT) as child:
        child.expect_exact("agents: x (first)  o (second); turn-based; you act for every agent (self-play)")
        child.expect_exact("step=0 to act: x\r\nview of x:")
        child.expect_exact("board: [0, 0, 0, 0, 0, 0, 0, 0, 0]")
        _act(child, "x", 4)
        # o's view: its own marks are 1, the opponent's 2 (the view is o's, not x's).
        child.expect_exact("step=1 to act: o\r\nview of o:")
        child.expect_exact("board: [0, 0, 0, 0, 2, 0, 0, 0, 0]")
        _act(child, "o", 4)  # taken: refused, nothing changes, o still to act
        child.expect(r"error: INVALID_ARGUMENT: cell 4 is not free")
        for agent, cell in (("o", 0), ("x", 2), ("o", 1), ("x", 6)):
            _act(child, agent, cell)
        child.expect_exact("  x: reward=1 return=1 terminated=True truncated=False")
        child.expect_exact("  o: reward=-1 return=-1 terminated=True truncated=False")
        child.expect_exact("step=5 episode over (terminated): x=1 o=-1")
        child.expect_exact("episode over: r to reset, q to quit")
        child.sendline("r")  # a new episode: the returns start again
        child.expect_exact("  x: reward=- return=0 terminated=False truncated=False")
        child.expect_exact("step=0 to act: x")
        child.sendline("q")
        child.expect(pexpect.EOF)


def test_a_simultaneous_game_asks_each_agent_then_steps_the_world_once() -> None:
    with _playing("openenv.games:RockPaperScissors") as child:
        child.expect_exact("agents: player_0  player_1; simultaneous; you act for every agent (self-play)")
        child.expect_exact("step=0 to act: player_0, player_1")
        # paper beats rock, rock beats scissors, a tie: player_0 wins 2 rounds of 3.
        for k, (a, b) in enumerate(((1, 0), (0, 2), (2, 2)), 1):
            child.expect_exact(">")
            child.sendline("")
            child.expect_exact("player_0 to act")
            child.expect_exact("action")
            child.sendline(str(a))
            child.expect_exact("player_1 to act")  # asked before the world steps
            assert f"step={k}" not in (child.before or "")
            child.expect_exact("action")
            child.sendline(str(b))
            child.expect_exact(f"step={k} ")
        child.expect_exact("episode over (terminated): player_0=2 player_1=-2")
        child.sendline("q")
        child.expect(pexpect.EOF)


def test_two_terminals_play_one_tic_tac_toe_world_agent_against_agent() -> None:
    """The first player acts for x and is told how a second one joins; the second joins for o
    from that line, waits for its turn, and both see the same game end."""
    x = _spawn(TTT, "--agent", "x")
    o: pexpect.spawn | None = None
    try:
        x.expect_exact("you act for x")
        x.expect(r"another player joins with: openenv play --join (\S+@grpc://127\.0\.0\.1:\d+)")
        ticket = x.match.group(1)
        x.expect_exact("step=0 to act: x")
        o = _spawn("--join", ticket)
        o.expect_exact("you act for o")
        o.expect_exact("waiting for x...")
        _act(x, "x", 0)
        x.expect_exact("waiting for o...")
        o.expect_exact("step=1 to act: o\r\nview of o:")
        o.expect_exact("board: [2, 0, 0, 0, 0, 0, 0, 0, 0]")
        for seat, agent, cell in ((o, "o", 3), (x, "x", 1), (o, "o", 4), (x, "x", 2)):
            _act(seat, agent, cell)
        x.expect_exact("step=5 episode over (terminated): x=1")
        o.expect_exact("step=5 episode over (terminated): o=-1")
        o.expect_exact("episode over: r waits for the next episode, q to quit")
        o.sendline("q")
        o.expect(pexpect.EOF)
        x.sendline("q")
        x.expect(pexpect.EOF)
    finally:
        x.close(force=True)
        if o is not None:
            o.close(force=True)
    assert x.exitstatus == 0 and o.exitstatus == 0
