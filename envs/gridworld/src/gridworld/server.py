"""The gridworld environment: walk a seeded maze to its goal, with typed protobuf messages.

Actions, observations and state are the ``gridworld.v1`` messages
(``envs/gridworld/proto/gridworld/v1/gridworld.proto``); their descriptors are advertised in
the handshake, so any client can decode them without these stubs.

Reward of a step: ``-0.01`` (time penalty) ``+ 0.1 * (d_before - d_after)`` where ``d`` is
the agent's breadth-first distance to the goal (so ``+0.09`` for a step towards the goal,
``-0.11`` away from it, ``-0.01`` against a wall), plus ``1.0`` when the agent reaches the
goal, which terminates the episode. The runtime truncates episodes after 100 steps.

Run it with ``gridworld-server --port 50051`` or
``openenv serve gridworld.server:GridWorldEnvironment``.

:class:`GridWorldBetterproto` (``gridworld.facade:GridWorldBetterproto``, the ``betterproto``
extra) is the same environment written against the betterproto2 dataclasses of the same
messages (``gridworld.bp.gridworld.v1``, :mod:`gridworld.facade`); clients cannot tell the two apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import openenv
from gridworld import maze
from gridworld.v1 import gridworld_pb2

__all__ = ["GOAL_REWARD", "SHAPING", "STEP_PENALTY", "GridWorldEnvironment", "main"]

STEP_PENALTY = -0.01
"""Added to every step's reward."""
SHAPING = 0.1
"""Times the decrease of the breadth-first distance to the goal."""
GOAL_REWARD = 1.0
"""Added on the step that reaches the goal."""

DEFAULT_SIZE = 9
MIN_SIZE, MAX_SIZE = 5, 51
_SIZE_KEYS = ("size", "height", "width")


def _maze_size(options: Mapping[str, Any], default: tuple[int, int]) -> tuple[int, int]:
    """(height, width) from options ``size`` (both) and/or ``height``/``width``."""
    unknown = sorted(set(options) - set(_SIZE_KEYS))
    if unknown:
        raise openenv.InvalidArgument(
            f"unknown gridworld option(s) {', '.join(unknown)}; known: {', '.join(_SIZE_KEYS)}"
        )
    for key in _SIZE_KEYS:
        v = options.get(key)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int) or v % 2 == 0 or not MIN_SIZE <= v <= MAX_SIZE
        ):
            raise openenv.InvalidArgument(
                f"option {key!r} must be an odd integer from {MIN_SIZE} to {MAX_SIZE}, got {v!r}"
            )
    height, width = default
    if options.get("size") is not None:
        height = width = options["size"]
    return options.get("height") or height, options.get("width") or width


@dataclasses.dataclass
class _Episode:
    seed: int
    walls: tuple[str, ...]
    to_goal: dict[maze.Cell, int]
    agent: maze.Cell
    goal: maze.Cell
    total_reward: float = 0.0


class GridWorldEnvironment(openenv.Environment):
    """A seeded maze. Options (handshake for the session's default, or reset for one
    episode): ``size`` (odd, 5..51, default 9), or ``height`` and ``width`` separately."""

    name = "gridworld"
    version = "0.1.0"
    description = (
        "A seeded maze on an odd-sized grid: move up, down, left or right to reach the goal. "
        "Typed protobuf actions, observations and state (gridworld.v1)."
    )
    action_type = gridworld_pb2.Action
    observation_type = gridworld_pb2.Observation
    state_type = gridworld_pb2.State
    position_type: ClassVar[Any] = gridworld_pb2.Position
    """The class of the positions in observations and state (built like the three above)."""
    deterministic = True
    snapshots = True  # RFC 0006: the default hooks (its state pickles)
    seeded = True  # the seed builds the maze (determinism.seeds_honoured checks it)
    max_episode_steps = 100
    reward_range = (round(STEP_PENALTY - SHAPING, 6), round(STEP_PENALTY + SHAPING + GOAL_REWARD, 6))
    max_sessions = 1024
    run_in_thread = False  # a step is a few dictionary look-ups: no need to leave the event loop
    example_actions = (
        gridworld_pb2.Action(move=gridworld_pb2.MOVE_UP),
        gridworld_pb2.Action(move=gridworld_pb2.MOVE_DOWN),
        gridworld_pb2.Action(move=gridworld_pb2.MOVE_LEFT),
        gridworld_pb2.Action(move=gridworld_pb2.MOVE_RIGHT),
    )
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "documentation_url": "envs/gridworld/README.md"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.size = _maze_size(options, (DEFAULT_SIZE, DEFAULT_SIZE))
        self.episode: _Episode | None = None

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        """Build the maze of ``seed`` (a fresh random seed when None, recorded in the
        state) and place the agent and the goal."""
        height, width = _maze_size(options or {}, self.size)
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        rng = random.Random(seed)
        walls = maze.generate(rng, height, width)
        start, goal = maze.place(rng, walls)
        self.episode = _Episode(seed, walls, maze.distances(walls, goal), start, goal)
        return openenv.StepResult(
            self._observation(bumped=False), metadata={"distance_to_goal": self.episode.to_goal[start]}
        )

    def step(self, action: gridworld_pb2.Action) -> openenv.StepResult:
        """Move one cell; a wall leaves the agent in place (``bumped``)."""
        ep = self.episode
        if ep is None:  # the runtime refuses steps before reset; kept for direct use
            raise openenv.FailedPrecondition("step before reset")
        delta = maze.DELTAS.get(action.move)
        if delta is None:
            move = int(action.move)
            name = gridworld_pb2.Move.Name(move) if move in gridworld_pb2.Move.values() else str(move)
            raise openenv.InvalidAction(f"move must be MOVE_UP, MOVE_DOWN, MOVE_LEFT or MOVE_RIGHT, got {name}")
        before = ep.to_goal[ep.agent]
        target = (ep.agent[0] + delta[0], ep.agent[1] + delta[1])
        bumped = ep.walls[target[0]][target[1]] == maze.WALL  # the border is all wall: never out of range
        if not bumped:
            ep.agent = target
        after = ep.to_goal[ep.agent]
        terminated = ep.agent == ep.goal
        reward = round(STEP_PENALTY + SHAPING * (before - after) + (GOAL_REWARD if terminated else 0.0), 6)
        ep.total_reward = round(ep.total_reward + reward, 6)
        return openenv.StepResult(
            self._observation(bumped=bumped), reward=reward, terminated=terminated, metadata={"distance_to_goal": after}
        )

    def state(self) -> gridworld_pb2.State | None:
        """Seed, size, positions and return so far; None before the first reset."""
        ep = self.episode
        if ep is None:
            return None
        return self.state_type(
            seed=ep.seed,
            height=len(ep.walls),
            width=len(ep.walls[0]),
            agent=self._pos(ep.agent),
            goal=self._pos(ep.goal),
            total_reward=ep.total_reward,
        )

    def render(self) -> str:
        """The maze as an SVG picture (walls dark, the goal green, the agent a blue disc),
        what the ``/web`` playground shows; a blank board before the first reset."""
        ep = self.episode
        cell = 24
        if ep is None:
            h, w = self.size
            return _svg(w * cell, h * cell, [])
        walls = []
        for r, row in enumerate(ep.walls):
            for c, ch in enumerate(row):
                if ch == maze.WALL:
                    walls.append(f'<rect x="{c * cell}" y="{r * cell}" width="{cell}" height="{cell}" fill="#334155"/>')
        shapes = [f'<g shape-rendering="crispEdges">{"".join(walls)}</g>']  # no seams between wall cells
        gr, gc = ep.goal
        shapes.append(
            f'<rect x="{gc * cell + 3}" y="{gr * cell + 3}" width="{cell - 6}" height="{cell - 6}" rx="4" '
            f'fill="#16a34a"><title>goal</title></rect>'
        )
        ar, ac = ep.agent
        shapes.append(
            f'<circle cx="{ac * cell + cell / 2}" cy="{ar * cell + cell / 2}" r="{cell * 0.36}" fill="#2563eb">'
            f"<title>agent</title></circle>"
        )
        return _svg(len(ep.walls[0]) * cell, len(ep.walls) * cell, shapes)

    def _observation(self, *, bumped: bool) -> gridworld_pb2.Observation:
        ep = self.episode
        assert ep is not None
        rows = [list(row) for row in ep.walls]
        rows[ep.goal[0]][ep.goal[1]] = "G"
        rows[ep.agent[0]][ep.agent[1]] = "A"  # drawn last: on the goal, the agent shows
        return self.observation_type(
            agent=self._pos(ep.agent), goal=self._pos(ep.goal), grid=["".join(r) for r in rows], bumped=bumped
        )

    def _pos(self, cell: maze.Cell) -> gridworld_pb2.Position:
        return self.position_type(row=cell[0], col=cell[1])


def _svg(width: int, height: int, shapes: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="gridworld maze">'
        f'<rect width="{width}" height="{height}" fill="#f8fafc"/>{"".join(shapes)}</svg>'
    )


def main(argv: list[str] | None = None) -> None:
    """``gridworld-server``: serve the environment over gRPC until SIGTERM/SIGINT."""
    ap = argparse.ArgumentParser(description="Serve the gridworld environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    ap.add_argument(
        "--ready-file", type=Path, default=None, help="write the bound address (grpc://host:port) here once serving"
    )
    ns = ap.parse_args(argv)

    def ready(server: openenv.Server) -> None:
        print(f"gridworld serving on {server.address}", flush=True)
        if ns.ready_file is not None:
            tmp = ns.ready_file.with_name(ns.ready_file.name + ".tmp")
            tmp.write_text(server.address)
            tmp.replace(ns.ready_file)

    openenv.serve(GridWorldEnvironment, ns.host, ns.port, ready=ready)


if __name__ == "__main__":
    main()
