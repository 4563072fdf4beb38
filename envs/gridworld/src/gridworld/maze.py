"""Mazes: generation from a seeded RNG, breadth-first distances and shortest paths.

A maze is a tuple of equal-length strings, ``'#'`` for a wall and ``'.'`` for floor, on an
odd-sized grid whose border is all wall. Rooms sit at odd (row, col) coordinates and the
maze is *perfect*: exactly one path joins any two floor cells.

What you may rely on:

* :func:`generate` and :func:`place` draw only from the ``random.Random`` they are given,
  so the same seed always gives the same maze, start and goal.
* :func:`shortest_path` returns the moves of a shortest walk (an optimal policy), which
  the demo and the tests use as a baseline agent.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence

from gridworld.v1 import gridworld_pb2

__all__ = ["DELTAS", "FLOOR", "WALL", "Cell", "distances", "generate", "place", "shortest_path"]

WALL = "#"
FLOOR = "."

Cell = tuple[int, int]
"""A (row, col) position; row 0 is the top, col 0 the left."""

DELTAS: dict[int, Cell] = {
    gridworld_pb2.MOVE_UP: (-1, 0),
    gridworld_pb2.MOVE_DOWN: (1, 0),
    gridworld_pb2.MOVE_LEFT: (0, -1),
    gridworld_pb2.MOVE_RIGHT: (0, 1),
}
"""The (row, col) offset of every valid :class:`gridworld.v1.Move`."""


def generate(rng: random.Random, height: int, width: int) -> tuple[str, ...]:
    """A perfect maze of ``height`` x ``width`` cells (both odd, >= 3) carved by a
    randomized depth-first search (recursive backtracker, iterative)."""
    if height < 3 or width < 3 or height % 2 == 0 or width % 2 == 0:
        raise ValueError(f"maze dimensions must be odd and >= 3, got {height}x{width}")
    wall = [[True] * width for _ in range(height)]
    start = (rng.randrange(1, height, 2), rng.randrange(1, width, 2))
    wall[start[0]][start[1]] = False
    stack = [start]
    while stack:
        r, c = stack[-1]
        options = [
            (r + dr, c + dc)
            for dr, dc in ((-2, 0), (2, 0), (0, -2), (0, 2))
            if 0 < r + dr < height - 1 and 0 < c + dc < width - 1 and wall[r + dr][c + dc]
        ]
        if not options:
            stack.pop()
            continue
        nr, nc = rng.choice(options)
        wall[(r + nr) // 2][(c + nc) // 2] = False
        wall[nr][nc] = False
        stack.append((nr, nc))
    return tuple("".join(WALL if w else FLOOR for w in row) for row in wall)


def distances(grid: Sequence[str], source: Cell) -> dict[Cell, int]:
    """Breadth-first distance (in moves) from ``source`` to every reachable non-wall cell.

    Any character other than ``'#'`` counts as floor, so rendered observation grids
    (with ``'A'`` and ``'G'``) work too.
    """
    dist = {source: 0}
    queue = collections.deque([source])
    while queue:
        r, c = queue.popleft()
        for dr, dc in DELTAS.values():
            nxt = (r + dr, c + dc)
            if (
                nxt not in dist
                and 0 <= nxt[0] < len(grid)
                and 0 <= nxt[1] < len(grid[nxt[0]])
                and grid[nxt[0]][nxt[1]] != WALL
            ):
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def place(rng: random.Random, grid: Sequence[str]) -> tuple[Cell, Cell]:
    """Draw (start, goal): two distinct rooms, the goal at least half the maze's
    longest distance from the start, so episodes are never trivial."""
    rooms = [(r, c) for r in range(1, len(grid), 2) for c in range(1, len(grid[0]), 2)]
    start = rng.choice(rooms)
    dist = distances(grid, start)
    far = max(dist[cell] for cell in rooms)
    goal = rng.choice([cell for cell in rooms if cell != start and dist[cell] * 2 >= far])
    return start, goal


def shortest_path(grid: Sequence[str], start: Cell, goal: Cell) -> list[int]:
    """The moves (``gridworld.v1.Move`` values) of a shortest walk from ``start`` to
    ``goal``; empty when they coincide. Raises ``ValueError`` when the goal is unreachable."""
    to_goal = distances(grid, goal)
    if start not in to_goal:
        raise ValueError(f"{goal} is not reachable from {start}")
    moves: list[int] = []
    here = start
    while here != goal:
        for move, (dr, dc) in DELTAS.items():
            nxt = (here[0] + dr, here[1] + dc)
            if to_goal.get(nxt, -1) == to_goal[here] - 1:
                moves.append(move)
                here = nxt
                break
    return moves
