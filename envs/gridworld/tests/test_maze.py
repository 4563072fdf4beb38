"""Maze generation, placement and planning (pure functions, no server needed)."""

from __future__ import annotations

import random

import pytest

from gridworld import maze

SIZES = [(5, 5), (7, 13), (9, 9), (21, 21)]


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_mazes_are_perfect_and_walled(height: int, width: int) -> None:
    for seed in range(20):
        grid = maze.generate(random.Random(seed), height, width)
        assert len(grid) == height and {len(row) for row in grid} == {width}
        assert set("".join(grid)) == {maze.WALL, maze.FLOOR}
        assert grid[0] == grid[-1] == maze.WALL * width
        assert all(row[0] == row[-1] == maze.WALL for row in grid)
        floor = {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == maze.FLOOR}
        rooms = {(r, c) for r in range(1, height, 2) for c in range(1, width, 2)}
        assert rooms <= floor
        assert set(maze.distances(grid, next(iter(rooms)))) == floor  # connected
        edges = sum(1 for r, c in floor for dr, dc in ((0, 1), (1, 0)) if (r + dr, c + dc) in floor)
        assert edges == len(floor) - 1  # a tree: exactly one path between any two cells


def test_start_goal_and_shortest_path() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        grid = maze.generate(rng, 9, 9)
        start, goal = maze.place(rng, grid)
        assert start != goal and start[0] % 2 == start[1] % 2 == goal[0] % 2 == goal[1] % 2 == 1
        dist = maze.distances(grid, start)
        assert 2 * dist[goal] >= max(dist[(r, c)] for r in range(1, 9, 2) for c in range(1, 9, 2))
        path = maze.shortest_path(grid, start, goal)
        assert len(path) == dist[goal]
        here = start
        for move in path:
            dr, dc = maze.DELTAS[move]
            here = (here[0] + dr, here[1] + dc)
            assert grid[here[0]][here[1]] == maze.FLOOR
        assert here == goal
    assert maze.shortest_path(grid, goal, goal) == []


def test_same_seed_same_maze_and_the_seed_7_maze_is_stable() -> None:
    """Mazes depend on the seed only; seed 7 is pinned so a change of generator is noticed
    (it would silently change every published seed's maze, e.g. the demo's)."""

    def build(seed: int) -> tuple[tuple[str, ...], maze.Cell, maze.Cell]:
        rng = random.Random(seed)
        grid = maze.generate(rng, 9, 9)
        return (grid, *maze.place(rng, grid))

    assert build(7) == build(7)
    assert build(7)[0] != build(8)[0]
    assert build(7) == (
        (
            "#########",
            "#.#.....#",
            "#.#.###.#",
            "#.....#.#",
            "#.#####.#",
            "#.#.....#",
            "#.#######",
            "#.......#",
            "#########",
        ),
        (7, 3),
        (1, 5),
    )


def test_invalid_sizes_are_refused() -> None:
    for h, w in ((4, 9), (9, 2), (1, 1)):
        with pytest.raises(ValueError, match="odd"):
            maze.generate(random.Random(0), h, w)
