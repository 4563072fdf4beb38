"""The task set: arithmetic expressions and word problems with integer answers.

:func:`generate` builds the set deterministically from a seed; :data:`TASKS` is the set
the environment samples from (1,000 tasks from seed 0). A reset with a seed picks the
same task on every machine.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

__all__ = ["KINDS", "TASKS", "Task", "generate", "sample"]


@dataclasses.dataclass(frozen=True)
class Task:
    """One problem: its index in the set, kind, question and integer answer."""

    id: int
    kind: str
    question: str
    answer: int


def _arithmetic(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    form = rng.randrange(4)
    if form == 0:
        return f"{a} + {b} * {c}", a + b * c
    if form == 1:
        return f"({a} - {b}) * {c}", (a - b) * c
    if form == 2:
        q = rng.randint(2, 30)
        return f"{q * c} / {c} + {a}", q + a
    return f"{a} * {c} - {b}", a * c - b


def _apples(rng: random.Random) -> tuple[str, int]:
    a, bags, per = rng.randint(3, 40), rng.randint(2, 9), rng.randint(2, 12)
    d = rng.randint(1, a)
    return (
        f"Ana has {a} apples. She buys {bags} bags with {per} apples each and then gives {d} apples "
        f"to a friend. How many apples does she have now?",
        a + bags * per - d,
    )


def _train(rng: random.Random) -> tuple[str, int]:
    v, t = rng.randint(40, 160), rng.randint(2, 9)
    return f"A train travels at {v} km/h for {t} hours. How many kilometres does it travel?", v * t


def _shop(rng: random.Random) -> tuple[str, int]:
    p, n = rng.randint(2, 25), rng.randint(2, 12)
    d = rng.randint(1, p * n // 2)
    return (
        f"A notebook costs {p} dollars. How many dollars do {n} notebooks cost after a discount of "
        f"{d} dollars on the total?",
        p * n - d,
    )


def _share(rng: random.Random) -> tuple[str, int]:
    k, q = rng.randint(2, 12), rng.randint(2, 25)
    return (f"{k * q} candies are shared equally among {k} children. How many candies does each child get?", q)


def _age(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(3, 40), rng.randint(1, 10), rng.randint(1, 20)
    return (
        f"Tom is {a} years old. His sister is {b} years older than him. How old will his sister be in {c} years?",
        a + b + c,
    )


def _area(rng: random.Random) -> tuple[str, int]:
    w, h = rng.randint(2, 60), rng.randint(2, 60)
    return f"A rectangle is {w} cm wide and {h} cm long. What is its area in square centimetres?", w * h


_GENERATORS: dict[str, list[Callable[[random.Random], tuple[str, int]]]] = {
    "arithmetic": [_arithmetic],
    "word": [_apples, _train, _shop, _share, _age, _area],
}
KINDS = tuple(_GENERATORS)


def generate(n: int = 1000, seed: int = 0) -> tuple[Task, ...]:
    """``n`` tasks, alternating kinds, fully determined by ``seed``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        question, answer = rng.choice(_GENERATORS[kind])(rng)
        if kind == "arithmetic":
            question = f"Compute {question}."
        out.append(Task(i, kind, question, answer))
    return tuple(out)


TASKS = generate()


def sample(seed: int | None = None, kind: str | None = None, task_id: int | None = None) -> Task:
    """A task: ``task_id`` when given, else drawn with ``seed`` (among ``kind`` when given).
    The same seed and kind always give the same task; no seed draws at random."""
    if task_id is not None:
        if not 0 <= task_id < len(TASKS):
            raise ValueError(f"task_id must be in [0, {len(TASKS)}), got {task_id}")
        return TASKS[task_id]
    pool = TASKS
    if kind is not None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        pool = tuple(t for t in TASKS if t.kind == kind)
    return random.Random(seed).choice(pool)
