#!/usr/bin/env python3
"""Self-play through the wire: a tabular agent learns a two-agent game by playing both sides.

ONE client session acts for every agent of a multi-agent world (RFC 0012, docs/multiagent.md):
each turn it reads ``StepResult.to_act`` and that agent's own view, picks a move for it, and
learns from the game's end. The learner is Monte Carlo control on a table: a state is the
acting agent's id and its view (the legal moves left out), the value of a move the mean final
reward of the games that played it there (a running average once visited often), moves chosen
epsilon-greedily (epsilon falling from ``--epsilon`` to 0.05). No model, no library beyond
openenv: it is the shape of self-play, not its state of the art.

Then the greedy agent plays a uniformly random opponent, from each seat, in the same kind of
session (the trained agent chooses for its seat, the random one for the other), and so does a
random agent for the baseline. The run prints and writes (``--out``) the win/draw/loss rates.

Any turn-based game whose views carry the legal moves (``legal_actions``, or an
``action_mask``) can be played: ``--game tictactoe`` (openenv's reference tic-tac-toe, the
default: needs only protoenv), ``--game connect_four`` (the catalog's), or any catalog import
(``--game openspiel:tic_tac_toe``, ``--game pettingzoo:classic.tictactoe_v3``).

    python examples/selfplay.py --games 4000 --out build/selfplay          # serves the game itself
    python examples/selfplay.py --url grpc://127.0.0.1:50051                # or plays a running server
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import openenv

MIN_STEP = 0.05
IGNORED = frozenset({"legal_actions", "legal_action_names", "action_mask", "legal_moves", "text"})


def game_class(game: str) -> type[openenv.Environment]:
    """The environment class ``--game`` names."""
    if game == "tictactoe":
        from openenv.games import TicTacToe

        return TicTacToe
    if game == "connect_four":
        from openenv_catalog.games.connect_four import ConnectFourEnvironment

        return ConnectFourEnvironment
    source, _, ident = game.partition(":")
    import importlib.metadata

    importers = {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.importers")}
    if source not in importers or not ident:
        raise SystemExit(f"--game: tictactoe, connect_four or SOURCE:ID of an importer ({', '.join(importers)})")
    cls: type[openenv.Environment] = importers[source].load()(ident)
    return cls


def legal_moves(view: Any) -> list[Any]:
    """The moves a view says its agent may play."""
    if isinstance(view, Mapping):
        if "legal_actions" in view:
            return list(view["legal_actions"])
        if "action_mask" in view:
            return [i for i, m in enumerate(view["action_mask"]) if m]
    raise ValueError("the game's views carry no legal moves (legal_actions or action_mask)")


def state_key(agent: str, view: Any) -> str:
    """The table's key of a state: the agent and its view, without the lists of legal moves."""
    if isinstance(view, Mapping):
        view = {k: v for k, v in view.items() if k not in IGNORED}
    return agent + "|" + json.dumps(view, sort_keys=True, separators=(",", ":"))


class TabularAgent:
    """Monte Carlo control on a table: Q(state, move) is the mean final reward after playing it."""

    def __init__(self, seed: int) -> None:
        self.q: dict[tuple[str, Any], float] = defaultdict(float)
        self.n: dict[tuple[str, Any], int] = defaultdict(int)  # visits of (state, move)
        self.rng = random.Random(seed)

    def act(self, agent: str, view: Any, epsilon: float) -> Any:
        moves = legal_moves(view)
        if self.rng.random() < epsilon:
            return self.rng.choice(moves)
        key = state_key(agent, view)
        best = max(self.q[(key, m)] for m in moves)
        return self.rng.choice([m for m in moves if self.q[(key, m)] == best])

    def learn(self, trajectory: list[tuple[str, str, Any]], returns: Mapping[str, float]) -> None:
        """Move each (state, move) of the game toward the final reward of the agent that played
        it: the mean of its returns at first, then a running average (the opponent, itself, keeps
        changing), with a step of at least :data:`MIN_STEP`."""
        for agent, key, move in trajectory:
            sa = (key, move)
            self.n[sa] += 1
            self.q[sa] += (returns[agent] - self.q[sa]) * max(MIN_STEP, 1 / self.n[sa])

    def to_json(self) -> dict[str, float]:
        return {f"{k}|{json.dumps(m)}": v for (k, m), v in self.q.items() if v}


async def play(
    env: openenv.EnvClient,
    seed: int,
    choose: Mapping[str, Any],
    trajectory: list[tuple[str, str, Any]] | None = None,
) -> dict[str, float]:
    """One game in a self-play session: ``choose[agent](agent, view)`` picks each agent's move.
    Returns each agent's return (its rewards summed)."""
    r = await env.reset(seed=seed)
    returns: dict[str, float] = defaultdict(float)
    for agent, step in r.agents.items():
        returns[agent] += step.reward or 0.0
    while not r.done:
        (agent,) = r.to_act  # turn-based: one agent to act
        view = r.agents[agent].observation
        move = choose[agent](agent, view)
        if trajectory is not None:
            trajectory.append((agent, state_key(agent, view), move))
        r = await env.step(move, agent_id=agent)
        for a, step in r.agents.items():
            returns[a] += step.reward or 0.0
    return dict(returns)


async def train(env: openenv.EnvClient, agent: TabularAgent, games: int, epsilon: float, seed: int) -> None:
    ids = [s.id for s in env.multi_agent.agents] if env.multi_agent is not None else []
    for i in range(games):
        eps = max(0.05, epsilon * (1 - i / max(1, games)))
        trajectory: list[tuple[str, str, Any]] = []
        learner = functools.partial(agent.act, epsilon=eps)  # both seats learn, one table
        returns = await play(env, seed + i, dict.fromkeys(ids, learner), trajectory)
        agent.learn(trajectory, returns)


async def evaluate(
    env: openenv.EnvClient, agent: TabularAgent | None, games: int, seed: int
) -> dict[str, dict[str, float]]:
    """Win/draw/loss rates of ``agent`` (greedy; ``None``: a random agent) against a random
    opponent, from each seat."""
    rng = random.Random(seed)
    randomly = lambda a, v: rng.choice(legal_moves(v))  # noqa: E731
    seats = [s.id for s in env.multi_agent.agents] if env.multi_agent is not None else []
    out: dict[str, dict[str, float]] = {}
    for seat in seats:
        me = randomly if agent is None else (lambda a, v: agent.act(a, v, 0.0))
        tally = {"win": 0, "draw": 0, "loss": 0}
        for i in range(games):
            choose = {s: (me if s == seat else randomly) for s in seats}
            ret = (await play(env, seed + 1_000_000 + i, choose))[seat]
            tally["win" if ret > 0 else "loss" if ret < 0 else "draw"] += 1
        out[seat] = {k: v / games for k, v in tally.items()}
    return out


@contextlib.asynccontextmanager
async def session(url: str | None, game: str) -> AsyncIterator[openenv.EnvClient]:
    """A self-play session: on ``url``, or on a server of ``game`` started here (gRPC, loopback)."""
    if url is not None:
        async with openenv.EnvClient(url) as env:
            yield env
        return
    async with openenv.Server(game_class(game), "127.0.0.1", 0) as srv, openenv.EnvClient(srv.address) as env:
        yield env


async def run(ns: argparse.Namespace) -> dict[str, Any]:
    agent = TabularAgent(ns.seed)
    async with session(ns.url, ns.game) as env:
        if env.multi_agent is None:
            raise SystemExit("the environment is not a multi-agent one (RFC 0012)")
        await train(env, agent, ns.games, ns.epsilon, ns.seed)
        trained = await evaluate(env, agent, ns.eval_games, ns.seed)
        baseline = await evaluate(env, None, ns.eval_games, ns.seed)
    return {
        "game": ns.url or ns.game,
        "training_games": ns.games,
        "eval_games_per_seat": ns.eval_games,
        "states_learned": len({k for k, _ in agent.q}),
        "trained_vs_random": trained,
        "random_vs_random": baseline,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="tictactoe", help="tictactoe, connect_four or SOURCE:ID (a catalog import)")
    ap.add_argument("--url", default=None, help="play a running server instead of serving --game here")
    ap.add_argument("--games", type=int, default=4000, help="self-play games to train on")
    ap.add_argument("--eval-games", type=int, default=300, help="games against random, per seat")
    ap.add_argument("--epsilon", type=float, default=0.3, help="exploration at the start (falls to 0.05)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="a directory for results.json")
    ns = ap.parse_args(argv)
    if ns.games < 0 or ns.eval_games < 1:
        ap.error("--games must be >= 0 and --eval-games >= 1")
    result = asyncio.run(run(ns))
    for seat, rates in result["trained_vs_random"].items():
        base = result["random_vs_random"][seat]
        print(
            f"{seat}: trained wins {rates['win']:.0%} (draws {rates['draw']:.0%}, losses {rates['loss']:.0%}) "
            f"against random; random wins {base['win']:.0%} from that seat"
        )
    if ns.out:
        Path(ns.out).mkdir(parents=True, exist_ok=True)
        (Path(ns.out) / "results.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
