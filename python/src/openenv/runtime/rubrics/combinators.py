"""Containers that combine their children's scores: weighted sums, sequences, gates."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from openenv.runtime.rubrics.base import (
    Rubric,
    Score,
    _bounds_union,
    _Container,
)


class WeightedSum(_Container):
    """``score = Σ weightᵢ · scoreᵢ`` over all children, summed left to right in order.

    ``weights``, when given, are the children's weights in this sum (same length as
    ``rubrics``); otherwise each child's own ``weight`` attribute is used. A child object
    is never modified, so one leaf may appear in several trees with different weights.
    Weights need not sum to 1 and may be negative (a penalty). Async children are
    evaluated concurrently.
    """

    description = "Weighted sum of the children's scores."

    kind = "weighted_sum"

    def __init__(
        self,
        rubrics: Sequence[Rubric],
        weights: Sequence[float] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        rubrics = list(rubrics)
        if not rubrics:
            raise ValueError("WeightedSum needs at least one child rubric")
        if weights is not None:
            weights = [float(w) for w in weights]
            if len(weights) != len(rubrics):
                raise ValueError(f"WeightedSum: {len(rubrics)} rubrics but {len(weights)} weights")
        super().__init__(
            rubrics, weights, name=name, description=description, weight=weight, minimum=minimum, maximum=maximum
        )
        if (
            minimum is None
            and maximum is None
            and all(r.minimum is not None and r.maximum is not None for r in rubrics)
        ):
            lo = hi = 0.0
            for r, w in zip(rubrics, self._weights, strict=True):
                a, b = w * r.minimum, w * r.maximum  # type: ignore[operator]
                lo, hi = lo + min(a, b), hi + max(a, b)
            self.minimum, self.maximum = lo, hi

    def params(self) -> dict[str, Any]:
        return {"weights": list(self._weights)}

    def _plan(self) -> Generator[list[Rubric], list[Score], Score]:
        scores = yield list(self._children)
        total = 0.0
        for s in scores:
            total += s.weight * s.score
        return Score(total, children=scores)


class Sequential(_Container):
    """Children evaluated in order until one fails (scores below ``threshold``).

    ``score`` = the first failing child's score, else the last child's score; either way
    it equals the score of the last child evaluated. The last child's own threshold does
    not matter (its score is the result). OpenEnv's ``Sequential`` (stop at the first 0)
    is this with 0/1 checks and the default threshold.
    """

    description = "Children in order until one fails; the last evaluated child's score."

    kind = "sequential"

    def __init__(
        self,
        *rubrics: Rubric,
        threshold: float = 1.0,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        if not rubrics:
            raise ValueError("Sequential needs at least one child rubric")
        super().__init__(rubrics, name=name, description=description, weight=weight, minimum=minimum, maximum=maximum)
        self.threshold = float(threshold)
        if minimum is None and maximum is None:
            self.minimum, self.maximum = _bounds_union(rubrics)

    def params(self) -> dict[str, Any]:
        return {"threshold": self.threshold}

    def _plan(self) -> Generator[list[Rubric], list[Score], Score]:
        evaluated: list[Score] = []
        for child in self._children:
            (s,) = yield [child]
            evaluated.append(s)
            if s.score < self.threshold:
                break
        return Score(evaluated[-1].score, children=evaluated)


class Gate(_Container):
    """``0`` unless ``condition`` scores at least ``threshold``; then ``then``'s score.

    With one child (``then`` omitted), the gate passes the condition's own score through
    when it reaches the threshold, else 0 (OpenEnv's ``Gate``). ``then`` is not evaluated
    when the gate is closed.
    """

    description = "0 unless the first child reaches the threshold, else the last child's score."

    kind = "gate"

    def __init__(
        self,
        condition: Rubric,
        then: Rubric | None = None,
        *,
        threshold: float = 1.0,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        kids = [condition] if then is None else [condition, then]
        super().__init__(kids, name=name, description=description, weight=weight, minimum=minimum, maximum=maximum)
        self.threshold = float(threshold)
        if minimum is None and maximum is None:
            self.minimum, self.maximum = _bounds_union(kids[-1:], (0.0,))

    def params(self) -> dict[str, Any]:
        return {"threshold": self.threshold}

    def _plan(self) -> Generator[list[Rubric], list[Score], Score]:
        (cond,) = yield [self._children[0]]
        if cond.score < self.threshold:
            return Score(0.0, children=[cond], reason=f"gate closed: {cond.name} {cond.score:g} < {self.threshold:g}")
        if len(self._children) == 1:
            return Score(cond.score, children=[cond])
        (then,) = yield [self._children[1]]
        return Score(then.score, children=[cond, then])
