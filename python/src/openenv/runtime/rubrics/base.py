"""The rubric tree: :class:`Rubric`, its :class:`Score`, function leaves (:func:`leaf`)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from typing import Any, ClassVar

from openenv.runtime.codec import to_struct
from openenv.v1 import rubric_pb2

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
        d: dict[str, Any] = {
            "name": self.name,
            "score": self.score,
            "weight": self.weight,
            "reason": self.reason,
            "children": [c.to_dict() for c in self.children],
        }
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
    snapshot_config: ClassVar[frozenset[str]] = frozenset({"name", "description", "weight", "minimum", "maximum"})
    """Attributes that are configuration, not per-episode state: a snapshot never carries them
    and a restore that names one is refused (RFC 0006). A subclass holding secrets or
    endpoints (an API key, a URL) lists them here, with its base's:
    ``snapshot_config = Rubric.snapshot_config | {"url", "api_key"}``."""
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

    def __init__(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        weight: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
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
        s = rubric_pb2.RubricSpec(name=self.name, kind=self.kind, description=self.description, weight=self.weight)
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
        raise ValueError(
            f"rubric name {name!r} must be non-empty, must not start with a space and "
            f"must not contain '.' (dots separate paths)"
        )


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
                raise ValueError(
                    f"{type(self).__name__} {self.name!r}: two children are named {r.name!r}; "
                    f"pass name= to tell them apart"
                )
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

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        self.fn = fn
        super().__init__(
            name=name or fn.__name__,
            description=description if description is not None else _summary(fn.__doc__),
            weight=weight,
            minimum=minimum,
            maximum=maximum,
        )
        self._wants_env = "env" in inspect.signature(fn).parameters

    def score(self, action: Any, observation: Any) -> Any:
        if self._wants_env:
            return self.fn(action, observation, env=self.env)
        return self.fn(action, observation)

    def _own_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def leaf(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    weight: float = 1.0,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """Make a :class:`FunctionRubric` from a function; usable bare or with options::

    @leaf(minimum=0, maximum=1)
    def is_number(action, observation) -> float: ...
    """

    def make(f: Callable[..., Any]) -> FunctionRubric:
        return FunctionRubric(f, name=name, description=description, weight=weight, minimum=minimum, maximum=maximum)

    return make(fn) if fn is not None else make
