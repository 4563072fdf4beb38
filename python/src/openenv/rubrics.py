"""Rubrics: rewards composed of checks, with the breakdown carried on the wire.

A rubric is a tree. Leaves score one step's ``(action, observation)``; containers
combine their children's scores. An environment declares its rubric as a class
attribute::

    class MathEnv(openenv.Environment):
        rubric = Gate(IsNumber(), WeightedSum([Correct(), Brevity()], [1.0, -0.2]))

and the runtime then, for every step whose result has no reward of its own, evaluates
the tree and sends ``reward`` = the root score plus ``reward_breakdown`` = the score
tree (``openenv.v1.RubricScore``). ``EnvironmentInfo.rubric`` carries the spec tree
(``openenv.v1.RubricSpec``). docs/rubrics.md states exactly how each kind's score
follows from its children's.

What you may rely on:

* Each session gets its own copy of the class's rubric (:meth:`Rubric.clone`), bound to
  the session's environment instance (``rubric.env``) and set as ``env.rubric``; it is
  reset (:meth:`Rubric.reset`) on every episode reset and closed when the session ends.
* A tree whose nodes are all sync is evaluated in one call, in a worker thread when the
  environment's ``run_in_thread`` is true (the default). A tree with an async node is
  evaluated on the event loop; its sync leaves are then called inline and should be
  cheap. :class:`WeightedSum` evaluates async children concurrently.
* A node's score is checked: it must be a finite number inside the node's declared
  ``minimum``/``maximum`` (else ``ValueError``, an INTERNAL error for the step).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import json
import math
import os
import re
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from openenv.codec import to_struct
from openenv.errors import Internal
from openenv.v1 import rubric_pb2

__all__ = [
    "CREDITS_METADATA_KEY",
    "ExponentialDiscountingTrajectoryRubric",
    "FunctionRubric",
    "Gate",
    "LLMJudge",
    "Rubric",
    "Score",
    "Sequential",
    "TrajectoryRubric",
    "WeightedSum",
    "leaf",
]

#: ``TimeStep.metadata`` key under which the runtime puts per-step credits of trajectory
#: rubrics on the step that ends an episode: ``{node path: [credit of step 1, ...]}``.
CREDITS_METADATA_KEY = "rubric_credits"

_NAME = re.compile(r"[^.\s][^.]*")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _summary(doc: str | None) -> str:
    return inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ").strip() if doc else ""


# --------------------------------------------------------------------------- scores

@dataclasses.dataclass
class Score:
    """One node's score for one step, with its evaluated children (``RubricScore``).

    A leaf may return a ``Score`` instead of a number to attach a ``reason``; the
    runtime fills ``name`` and ``weight`` from the node. ``credits`` is set on a
    trajectory node at the end of an episode (per-step credit assignment); it is not
    part of ``RubricScore`` and travels in ``TimeStep.metadata`` instead
    (:data:`CREDITS_METADATA_KEY`).
    """

    score: float
    name: str = ""
    weight: float = 1.0
    children: list[Score] = dataclasses.field(default_factory=list)
    reason: str = ""
    credits: list[float] | None = None

    def to_proto(self, out: rubric_pb2.RubricScore | None = None) -> rubric_pb2.RubricScore:
        """The wire form (``openenv.v1.RubricScore``)."""
        m = rubric_pb2.RubricScore() if out is None else out
        m.name, m.score, m.weight, m.reason = self.name, self.score, self.weight, self.reason
        for c in self.children:
            c.to_proto(m.children.add())
        return m

    @classmethod
    def from_proto(cls, m: rubric_pb2.RubricScore) -> Score:
        """Parse a ``RubricScore`` (e.g. ``StepResult.reward_breakdown`` on the client)."""
        return cls(m.score, m.name, m.weight, [cls.from_proto(c) for c in m.children], m.reason)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form: name, score, weight, reason, children (and credits if set)."""
        d: dict[str, Any] = {"name": self.name, "score": self.score, "weight": self.weight,
                             "reason": self.reason, "children": [c.to_dict() for c in self.children]}
        if self.credits is not None:
            d["credits"] = list(self.credits)
        return d

    def __getitem__(self, name: str) -> Score:
        """The evaluated child called ``name`` (``KeyError`` when it was not evaluated)."""
        for c in self.children:
            if c.name == name:
                return c
        raise KeyError(name)

    def find(self, path: str) -> Score:
        """A descendant by dot path relative to this node, e.g. ``"total.correct"``."""
        node = self
        for part in path.split("."):
            node = node[part]
        return node

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Score]]:
        """``(dot path, node)`` for this node and every descendant, depth first."""
        path = f"{prefix}.{self.name}" if prefix else self.name
        yield path, self
        for c in self.children:
            yield from c.walk(path)

    def credit_map(self) -> dict[str, list[float]]:
        """Per-step credits of every trajectory node in this tree, by dot path."""
        return {p: list(s.credits) for p, s in self.walk() if s.credits is not None}


# --------------------------------------------------------------------------- base

class Rubric:
    """A node of a rubric tree. Subclass and override :meth:`score` for a leaf.

    ``score(action, observation)`` may be a plain or an ``async def`` method and returns a
    number or a :class:`Score` (to attach a ``reason``). The environment instance of the
    session is available as ``self.env`` (``None`` outside a server).

    Attributes (settable as class attributes or through ``__init__``):
        name: unique among siblings, no dots (default: the class name in snake case).
        description: what the node measures (default: the class docstring's summary).
        weight: the node's weight inside a :class:`WeightedSum` parent.
        minimum, maximum: inclusive bounds of the node's score, when bounded.
    """

    kind: ClassVar[str] = "leaf"
    name: str = ""
    description: str = ""
    weight: float = 1.0
    minimum: float | None = None
    maximum: float | None = None
    env: Any = None
    last_score: Score | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = _snake(cls.__name__)
        if "description" not in cls.__dict__:
            cls.description = _summary(cls.__doc__)

    def __init__(self, *, name: str | None = None, description: str | None = None, weight: float | None = None,
                 minimum: float | None = None, maximum: float | None = None) -> None:
        if name is not None:
            self.name = name
        if description is not None:
            self.description = description
        if weight is not None:
            self.weight = float(weight)
        if minimum is not None:
            self.minimum = float(minimum)
        if maximum is not None:
            self.maximum = float(maximum)
        _check_name(self.name or "")
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"rubric {self.name!r}: minimum {self.minimum} > maximum {self.maximum}")

    # -- what subclasses override

    def score(self, action: Any, observation: Any) -> float | Score | Awaitable[float | Score]:
        """This leaf's score for one step. Containers do not override it."""
        raise NotImplementedError(f"{type(self).__name__} must override score(action, observation)")

    def children(self) -> Sequence[Rubric]:
        """Child rubrics, in evaluation order (none for a leaf)."""
        return ()

    def params(self) -> dict[str, Any]:
        """Kind-specific parameters advertised in the spec (JSON-like)."""
        return {}

    def reset(self) -> None:
        """Forget per-episode state; called by the runtime on every episode reset.
        Overrides must call ``super().reset()`` (it resets the children)."""
        self.last_score = None
        for c in self.children():
            c.reset()

    async def aclose(self) -> None:
        """Release resources (connections); called when the session ends."""
        for c in self.children():
            await c.aclose()

    def _own_async(self) -> bool:
        return inspect.iscoroutinefunction(type(self).score)

    # -- the tree

    @property
    def is_async(self) -> bool:
        """True when this node or a descendant scores asynchronously."""
        return self._own_async() or any(c.is_async for c in self.children())

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Rubric]]:
        """``(dot path, node)`` for this node and every descendant, depth first."""
        path = f"{prefix}.{self.name}" if prefix else self.name
        yield path, self
        for c in self.children():
            yield from c.walk(path)

    def spec(self) -> rubric_pb2.RubricSpec:
        """The static description of this tree (``openenv.v1.RubricSpec``)."""
        s = rubric_pb2.RubricSpec(name=self.name, kind=self.kind, description=self.description,
                                  weight=self.weight)
        p = self.params()
        if p:
            to_struct(p, s.params)
        if self.minimum is not None:
            s.minimum = self.minimum
        if self.maximum is not None:
            s.maximum = self.maximum
        for c, w in zip(self.children(), self.child_weights(), strict=True):
            cs = c.spec()
            cs.weight = w
            s.children.append(cs)
        return s

    def child_weights(self) -> list[float]:
        """Each child's weight inside this node (what the spec and the scores carry)."""
        return [c.weight for c in self.children()]

    def clone(self) -> Rubric:
        """An independent deep copy (per-session state, no open connections)."""
        return copy.deepcopy(self)

    def bind(self, env: Any) -> Rubric:
        """Set ``env`` on this node and every descendant; returns ``self``."""
        for _, node in self.walk():
            node.env = env
        return self

    # -- evaluation

    async def evaluate(self, action: Any, observation: Any, *, done: bool = False) -> Score:
        """Score one step; the tree of scores. ``done`` tells trajectory nodes that this
        step ends the episode."""
        return await _eval_async(self, action, observation, done)

    def evaluate_sync(self, action: Any, observation: Any, *, done: bool = False) -> Score:
        """:meth:`evaluate` for trees without async nodes (``TypeError`` otherwise)."""
        return _eval_sync(self, action, observation, done)

    def __call__(self, action: Any, observation: Any) -> Any:
        """The root score as a float (an awaitable of it for async trees), as OpenEnv's
        ``rubric(action, observation)``."""
        if self.is_async:
            async def run() -> float:
                return (await self.evaluate(action, observation)).score
            return run()
        return self.evaluate_sync(action, observation).score

    # -- internals shared by the drivers

    def _leaf(self, action: Any, observation: Any, done: bool) -> Any:
        return self.score(action, observation)

    def _finish(self, value: Any) -> Score:
        s = _as_score(value, self)
        s.name, s.weight = self.name, self.weight
        if not math.isfinite(s.score):
            raise ValueError(f"rubric {self.name!r} scored {s.score!r}: scores must be finite")
        tol = 1e-9 * max(1.0, abs(s.score))
        if self.minimum is not None and s.score < self.minimum - tol:
            raise ValueError(f"rubric {self.name!r} scored {s.score} below its minimum {self.minimum}")
        if self.maximum is not None and s.score > self.maximum + tol:
            raise ValueError(f"rubric {self.name!r} scored {s.score} above its maximum {self.maximum}")
        self.last_score = s
        return s

    def __repr__(self) -> str:
        kids = ", ".join(repr(c) for c in self.children())
        return f"{type(self).__name__}({self.name!r}{', ' + kids if kids else ''})"


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(f"rubric name {name!r} must be non-empty, must not start with a space and "
                         f"must not contain '.' (dots separate paths)")


def _as_score(value: Any, node: Rubric) -> Score:
    if isinstance(value, Score):
        return value
    if isinstance(value, bool):
        return Score(float(value))
    if isinstance(value, (int, float)):
        return Score(float(value))
    if hasattr(value, "__float__") and not isinstance(value, (str, bytes)):  # numpy scalars
        return Score(float(value))
    raise TypeError(f"rubric {node.name!r} returned {type(value).__name__}; expected a number or a Score")


class _Container(Rubric):
    """A node whose score follows from its children's (see :meth:`_plan`)."""

    def __init__(self, rubrics: Sequence[Rubric], weights: Sequence[float] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        rubrics = list(rubrics)
        seen: set[str] = set()
        for r in rubrics:
            if not isinstance(r, Rubric):
                raise TypeError(f"{type(self).__name__} children must be Rubric instances, got {type(r).__name__}")
            if r.name in seen:
                raise ValueError(f"{type(self).__name__} {self.name!r}: two children are named {r.name!r}; "
                                 f"pass name= to tell them apart")
            seen.add(r.name)
        self._children = rubrics
        # A child's weight belongs to this parent: children shared between trees keep theirs.
        self._weights = [float(w) for w in weights] if weights is not None else [r.weight for r in rubrics]
        self._weight_of = {r.name: w for r, w in zip(rubrics, self._weights, strict=True)}

    def children(self) -> Sequence[Rubric]:
        return tuple(self._children)

    def child_weights(self) -> list[float]:
        return list(self._weights)

    def _own_async(self) -> bool:
        return False

    def _plan(self) -> Generator[list[Rubric], list[Score], Score]:
        """Yield the children to evaluate next (evaluated concurrently when async), receive
        their scores, and finally return this node's score (with evaluated children)."""
        raise NotImplementedError


def _bounds_union(nodes: Sequence[Rubric], extra: Sequence[float] = ()) -> tuple[float | None, float | None]:
    lows = [n.minimum for n in nodes] + list(extra)
    highs = [n.maximum for n in nodes] + list(extra)
    if any(v is None for v in lows) or any(v is None for v in highs):
        return None, None
    return min(lows), max(highs)  # type: ignore[type-var]


def _eval_sync(node: Rubric, action: Any, observation: Any, done: bool) -> Score:
    if isinstance(node, _Container):
        gen = node._plan()
        try:
            req = next(gen)
            while True:
                got = [_eval_sync(c, action, observation, done) for c in req]
                for sc in got:
                    sc.weight = node._weight_of[sc.name]
                req = gen.send(got)
        except StopIteration as stop:
            return node._finish(stop.value)
    value = node._leaf(action, observation, done)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        raise TypeError(f"rubric {node.name!r} is async: use `await rubric.evaluate(...)`")
    return node._finish(value)


async def _eval_async(node: Rubric, action: Any, observation: Any, done: bool) -> Score:
    if isinstance(node, _Container):
        gen = node._plan()
        try:
            req = next(gen)
            while True:
                if len(req) == 1:
                    got = [await _eval_async(req[0], action, observation, done)]
                else:
                    got = list(await asyncio.gather(*(_eval_async(c, action, observation, done) for c in req)))
                for sc in got:
                    sc.weight = node._weight_of[sc.name]
                req = gen.send(got)
        except StopIteration as stop:
            return node._finish(stop.value)
    value = node._leaf(action, observation, done)
    if inspect.isawaitable(value):
        value = await value
    return node._finish(value)


# --------------------------------------------------------------------------- leaves from functions

class FunctionRubric(Rubric):
    """A leaf scored by a function ``fn(action, observation)`` (sync or async).

    When ``fn`` has a parameter named ``env``, the session's environment instance is
    passed to it as ``env=`` (to read the ground truth of the task).
    """

    description = ""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                 weight: float = 1.0, minimum: float | None = None, maximum: float | None = None) -> None:
        self.fn = fn
        super().__init__(name=name or fn.__name__,
                         description=description if description is not None else _summary(fn.__doc__),
                         weight=weight, minimum=minimum, maximum=maximum)
        self._wants_env = "env" in inspect.signature(fn).parameters

    def score(self, action: Any, observation: Any) -> Any:
        if self._wants_env:
            return self.fn(action, observation, env=self.env)
        return self.fn(action, observation)

    def _own_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def leaf(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         weight: float = 1.0, minimum: float | None = None, maximum: float | None = None) -> Any:
    """Make a :class:`FunctionRubric` from a function; usable bare or with options::

        @leaf(minimum=0, maximum=1)
        def is_number(action, observation) -> float: ...
    """

    def make(f: Callable[..., Any]) -> FunctionRubric:
        return FunctionRubric(f, name=name, description=description, weight=weight,
                              minimum=minimum, maximum=maximum)

    return make(fn) if fn is not None else make


# --------------------------------------------------------------------------- containers

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

    def __init__(self, rubrics: Sequence[Rubric], weights: Sequence[float] | None = None, *,
                 name: str | None = None, description: str | None = None, weight: float = 1.0,
                 minimum: float | None = None, maximum: float | None = None) -> None:
        rubrics = list(rubrics)
        if not rubrics:
            raise ValueError("WeightedSum needs at least one child rubric")
        if weights is not None:
            weights = [float(w) for w in weights]
            if len(weights) != len(rubrics):
                raise ValueError(f"WeightedSum: {len(rubrics)} rubrics but {len(weights)} weights")
        super().__init__(rubrics, weights, name=name, description=description, weight=weight,
                         minimum=minimum, maximum=maximum)
        if minimum is None and maximum is None and all(
                r.minimum is not None and r.maximum is not None for r in rubrics):
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

    def __init__(self, *rubrics: Rubric, threshold: float = 1.0, name: str | None = None,
                 description: str | None = None, weight: float = 1.0, minimum: float | None = None,
                 maximum: float | None = None) -> None:
        if not rubrics:
            raise ValueError("Sequential needs at least one child rubric")
        super().__init__(rubrics, name=name, description=description, weight=weight,
                         minimum=minimum, maximum=maximum)
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

    def __init__(self, condition: Rubric, then: Rubric | None = None, *, threshold: float = 1.0,
                 name: str | None = None, description: str | None = None, weight: float = 1.0,
                 minimum: float | None = None, maximum: float | None = None) -> None:
        kids = [condition] if then is None else [condition, then]
        super().__init__(kids, name=name, description=description, weight=weight,
                         minimum=minimum, maximum=maximum)
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


# --------------------------------------------------------------------------- trajectories

class TrajectoryRubric(Rubric):
    """An episode-level score credited to steps.

    Every step it is evaluated on is recorded in ``trajectory`` as ``(action,
    observation)``. Until the episode ends the node scores ``intermediate_reward``; on
    the step that ends it (terminated, truncated, or the runtime's ``max_episode_steps``)
    it scores :meth:`score_trajectory` (the *final* score) and assigns per-step credits
    with :meth:`compute_step_rewards`, carried in ``Score.credits`` and, on the wire, in
    ``TimeStep.metadata[CREDITS_METADATA_KEY]``. :meth:`reset` clears the trajectory.

    Pass ``fn(trajectory) -> float`` (sync or async) or override :meth:`score_trajectory`.
    Put trajectory nodes where they are evaluated on every step (the root, or under a
    :class:`WeightedSum`): under a closed gate a step is not recorded.
    """

    description = "Episode-level score, credited to the episode's steps."

    kind = "trajectory"

    def __init__(self, fn: Callable[[list[tuple[Any, Any]]], Any] | None = None, *,
                 intermediate_reward: float = 0.0, name: str | None = None, description: str | None = None,
                 weight: float = 1.0, minimum: float | None = None, maximum: float | None = None) -> None:
        self.fn = fn
        if description is None and fn is not None and fn.__doc__:
            description = _summary(fn.__doc__)
        super().__init__(name=name, description=description, weight=weight, minimum=minimum, maximum=maximum)
        self.intermediate_reward = float(intermediate_reward)
        self.trajectory: list[tuple[Any, Any]] = []
        self.final_score: float | None = None

    def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float | Score | Awaitable[float | Score]:
        """The episode's final score, from every recorded ``(action, observation)``."""
        if self.fn is None:
            raise NotImplementedError(f"{type(self).__name__}: pass fn= or override score_trajectory")
        return self.fn(trajectory)

    def compute_step_rewards(self) -> list[float]:
        """Credit of each recorded step once the episode ended (default: the final score
        on the last step, ``intermediate_reward`` on the others)."""
        n = len(self.trajectory)
        if self.final_score is None or n == 0:
            return [self.intermediate_reward] * n
        return [self.intermediate_reward] * (n - 1) + [self.final_score]

    def params(self) -> dict[str, Any]:
        return {"intermediate_reward": self.intermediate_reward}

    def reset(self) -> None:
        super().reset()
        self.trajectory = []
        self.final_score = None

    def _own_async(self) -> bool:
        if self.fn is not None and type(self).score_trajectory is TrajectoryRubric.score_trajectory:
            return inspect.iscoroutinefunction(self.fn)
        return inspect.iscoroutinefunction(type(self).score_trajectory)

    def _leaf(self, action: Any, observation: Any, done: bool) -> Any:
        self.trajectory.append((action, observation))
        if not done:
            return Score(self.intermediate_reward, reason=f"step {len(self.trajectory)}: episode running")
        value = self.score_trajectory(list(self.trajectory))
        if inspect.isawaitable(value):
            return self._final_async(value)
        return self._final(value)

    async def _final_async(self, pending: Awaitable[Any]) -> Score:
        return self._final(await pending)

    def _final(self, value: Any) -> Score:
        s = _as_score(value, self)
        self.final_score = s.score
        s.credits = [float(c) for c in self.compute_step_rewards()]
        if not s.reason:
            s.reason = f"episode of {len(self.trajectory)} steps scored {s.score:g}"
        return s


class ExponentialDiscountingTrajectoryRubric(TrajectoryRubric):
    """A trajectory rubric whose credits decay backwards: with T recorded steps and final
    score F, step t (1-based) gets ``gamma ** (T - t) * F`` (the last step gets F)."""

    description = "Episode-level score, credited to steps with exponential discounting."

    def __init__(self, fn: Callable[[list[tuple[Any, Any]]], Any] | None = None, *, gamma: float = 0.99,
                 intermediate_reward: float = 0.0, name: str | None = None, description: str | None = None,
                 weight: float = 1.0, minimum: float | None = None, maximum: float | None = None) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        super().__init__(fn, intermediate_reward=intermediate_reward, name=name, description=description,
                         weight=weight, minimum=minimum, maximum=maximum)
        self.gamma = float(gamma)

    def compute_step_rewards(self) -> list[float]:
        n = len(self.trajectory)
        if self.final_score is None:
            return [self.intermediate_reward] * n
        return [self.gamma ** (n - 1 - t) * self.final_score for t in range(n)]

    def params(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "intermediate_reward": self.intermediate_reward}


# --------------------------------------------------------------------------- LLM judge

DEFAULT_JUDGE_SYSTEM_PROMPT = (
    "You are a strict grader. Read the task and the response, then reply with a short "
    "justification followed by a final line of the form 'Score: X'.")
DEFAULT_SCORE_PATTERN = r"(?i)\bscore\b\**\s*(?:is|=|:)?\s*\**\s*(-?\d+(?:\.\d+)?)"
_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*")


class JudgeError(Exception):
    """The judge could not produce a score (transport, HTTP status, unparsable reply)."""


class LLMJudge(Rubric):
    """A leaf scored by a language model behind any OpenAI-compatible chat endpoint.

    It POSTs ``{"model", "messages", "temperature", "max_tokens"}`` to
    ``{base_url}/chat/completions`` (``base_url`` as for OpenAI clients, e.g.
    ``"http://127.0.0.1:8000/v1"``; a URL already ending in ``/chat/completions`` is used
    as is) and reads ``choices[0].message.content``. The score is taken from, in order:
    a JSON object reply with a ``"score"`` (and optional ``"reason"``); the last match of
    ``score_pattern`` (default: ``Score: X``); a reply that is just a number. The raw
    score is mapped from ``scale`` to [0, 1] and clamped; the reply is the ``reason``.

    Failures (connection refused, timeout after ``timeout_s``, HTTP status >= 400, a
    malformed response, no score in the reply): with ``fallback_score=None`` (the default)
    the step fails with INTERNAL (``"LLM judge 'name' failed: ..."``); otherwise the node
    scores ``fallback_score`` and the reason says why.

    ``prompt`` is a ``str.format`` template with ``{action}`` and ``{observation}`` (and
    ``{env}``), or a function ``(action, observation) -> str``. The API key is ``api_key``
    or the environment variable named by ``api_key_env``, sent as a Bearer token when set.
    """

    description = "Scored by a language model judge."

    kind = "llm_judge"

    def __init__(self, prompt: str | Callable[[Any, Any], str], *, base_url: str, model: str,
                 api_key: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 system_prompt: str | None = DEFAULT_JUDGE_SYSTEM_PROMPT,
                 score_pattern: str = DEFAULT_SCORE_PATTERN, scale: tuple[float, float] = (0.0, 1.0),
                 temperature: float = 0.0, max_tokens: int | None = 512, timeout_s: float = 60.0,
                 fallback_score: float | None = None, headers: Mapping[str, str] | None = None,
                 extra_body: Mapping[str, Any] | None = None, name: str | None = None,
                 description: str | None = None, weight: float = 1.0) -> None:
        super().__init__(name=name, description=description, weight=weight, minimum=0.0, maximum=1.0)
        lo, hi = (float(x) for x in scale)
        if hi <= lo:
            raise ValueError(f"LLMJudge scale must be (low, high) with low < high, got {scale}")
        if fallback_score is not None and not 0.0 <= fallback_score <= 1.0:
            raise ValueError("LLMJudge fallback_score must be in [0, 1]")
        self.prompt = prompt
        url = base_url.rstrip("/")
        self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.model, self.system_prompt = model, system_prompt
        self.api_key, self.api_key_env = api_key, api_key_env
        self.score_pattern = re.compile(score_pattern)
        self.scale = (lo, hi)
        self.temperature, self.max_tokens, self.timeout_s = float(temperature), max_tokens, float(timeout_s)
        self.fallback_score = None if fallback_score is None else float(fallback_score)
        self.headers, self.extra_body = dict(headers or {}), dict(extra_body or {})
        self._client: Any = None
        self._client_loop: Any = None

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"model": self.model, "scale": list(self.scale), "temperature": self.temperature}
        if self.fallback_score is not None:
            p["fallback_score"] = self.fallback_score
        return p

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = state["_client_loop"] = None  # never share a connection pool between copies
        return state

    def render(self, action: Any, observation: Any) -> str:
        """The user message for one step."""
        if callable(self.prompt):
            return self.prompt(action, observation)
        return self.prompt.format(action=action, observation=observation, env=self.env)

    def parse(self, text: str) -> tuple[float, str]:
        """``(raw score, reason)`` from a reply; ``JudgeError`` when there is none."""
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                obj = json.loads(stripped)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("score"), (int, float)) \
                    and not isinstance(obj.get("score"), bool):
                return float(obj["score"]), str(obj.get("reason", obj.get("rationale", "")))
        matches = self.score_pattern.findall(text)
        if matches:
            last = matches[-1]
            return float(last if isinstance(last, str) else last[0]), stripped
        m = _NUMBER.fullmatch(text)
        if m:
            return float(m.group(1)), stripped
        raise JudgeError(f"no score in the judge's reply {stripped[:200]!r}")

    def normalize(self, raw: float) -> float:
        """Map a raw score from ``scale`` to [0, 1], clamped."""
        lo, hi = self.scale
        return min(1.0, max(0.0, (raw - lo) / (hi - lo)))

    async def complete(self, prompt: str) -> str:
        """One chat completion; the reply's text (``JudgeError`` on any failure)."""
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - httpx is a dependency of openenv
            raise JudgeError("LLMJudge needs httpx (pip install httpx)") from e
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:  # a pool belongs to one event loop
            self._client, self._client_loop = httpx.AsyncClient(timeout=self.timeout_s), loop
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body.update(self.extra_body)
        headers = dict(self.headers)
        key = self.api_key or os.environ.get(self.api_key_env or "", "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            resp = await self._client.post(self.url, json=body, headers=headers)
        except httpx.TimeoutException:
            raise JudgeError(f"no answer from {self.url} within {self.timeout_s:g} s") from None
        except httpx.HTTPError as e:
            raise JudgeError(f"request to {self.url} failed: {type(e).__name__}: {e}") from None
        if resp.status_code >= 400:
            raise JudgeError(f"{self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"malformed chat completion from {self.url}: {resp.text[:200]}") from None
        if not isinstance(content, str):
            raise JudgeError(f"the judge's reply has no text content: {content!r}"[:300])
        return content

    async def score(self, action: Any, observation: Any) -> Score:
        try:
            raw, reason = self.parse(await self.complete(self.render(action, observation)))
        except JudgeError as e:
            if self.fallback_score is None:
                raise Internal(f"LLM judge {self.name!r} failed: {e}") from None
            return Score(self.fallback_score, reason=f"judge failed, fallback score used: {e}")
        return Score(self.normalize(raw), reason=reason[:4000])

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            await client.aclose()
